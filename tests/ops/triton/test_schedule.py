"""How the Triton forward cuts its work (gdn.ops.triton.schedule): pure functions, no kernels."""


def test_choose_segments_fills_one_wave():
    from gdn.ops.triton.schedule import choose_segments
    assert choose_segments(64, 512, 132) == 4              # 256 programs on 264 slots, not 320
    assert choose_segments(128, 512, 132, programs_per_sm=1) == 1
    assert choose_segments(128, 512, 132, programs_per_sm=2) == 2
    assert choose_segments(1024, 64, 132) == 1
    assert choose_segments(4, 12, 132) == 3                # at least min_chunks chunks a segment


def test_walks_one_segment_where_the_maps_would_lose_more():
    """Below the automatic split's least chunk count, one segment from 16 sequences x value heads; from
    it while heads^2 x chunks stays within MAPS_BUDGET (8 heads at 512 chunks, 4 at 2048, 2 at 8192)
    the segment maps, one segment past it (benchmarks/NOTES.md v57)."""
    from gdn.ops.triton.schedule import walks_one_segment
    assert [walks_one_segment(h, 128, 512) for h in (2, 8, 15, 16, 32)] == [False, False, False, True, True]
    assert [walks_one_segment(h, 511, 512) for h in (8, 16)] == [False, True]
    assert [walks_one_segment(h, 512, 512) for h in (1, 4, 8, 9, 16)] == [False, False, False, True, True]
    assert [walks_one_segment(4, c, 512) for c in (1024, 2048, 2049)] == [False, False, True]
    assert [walks_one_segment(2, c, 512) for c in (8192, 8193)] == [False, True]


def test_choose_pieces_follows_the_sweep():
    """B = 1, 32 value heads, 128 walk programs on 132 SMs: pieces of at least 4096 tokens (the host's
    launches keep pace), as timed on the H200 at T = 8k, 16k, 32k and 128k (benchmarks/NOTES.md v6);
    with the flags overlap (no launches a piece) 2 from 4096 tokens (v8); none for short sequences or
    a full GPU; counted in tokens, so smaller chunks get no more pieces."""
    from gdn.ops.triton.schedule import choose_pieces
    assert [choose_pieces(128, T // 64, 64, 132) for T in (2048, 4096, 8192, 16384, 32768, 131072, 1 << 20)] == \
        [1, 1, 2, 4, 8, 16, 16]
    assert [choose_pieces(128, T // 64, 64, 132, flags=True) for T in (2048, 4096, 8192, 32768)] == [1, 2, 2, 8]
    assert choose_pieces(128, 8192 // 16, 16, 132) == 2
    assert choose_pieces(512, 4096, 64, 132) == 1           # the walk fills the GPU: nothing beside it


def test_choose_flag_group_grows_for_long_sequences():
    """Groups of 8 chunks, 16 from 1024 chunks on (B = 1 on the H200: 16 paid at T = 128k, cost at
    8k and 16k; benchmarks/NOTES.md v8)."""
    from gdn.ops.triton.schedule import choose_flag_group
    assert [choose_flag_group(T // 64) for T in (8192, 16384, 32768, 65535, 65536, 131072)] == [8, 8, 8, 8, 16, 16]


def test_host_arithmetic_matches_triton():
    """schedule.cdiv and next_pow2, the launcher's plain-Python twins of Triton's host helpers."""
    import triton
    from gdn.ops.triton.schedule import cdiv, next_pow2
    assert all(cdiv(a, b) == triton.cdiv(a, b) for a in range(0, 300) for b in range(1, 70))
    assert all(next_pow2(n) == triton.next_power_of_2(n) for n in range(1, 5000))
    assert cdiv(2 ** 40 + 1, 64) == 2 ** 34 + 1 and next_pow2(2 ** 33 + 1) == 2 ** 34
