"""Command-line interface: gdn demo | verify | bench."""
