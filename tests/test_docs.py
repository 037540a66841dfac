"""The examples in public docstrings run and print what they say."""
import doctest

import gdn.api


def test_api_docstring_examples():
    result = doctest.testmod(gdn.api)
    assert result.attempted > 0 and result.failed == 0
