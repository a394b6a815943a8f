// CPU tests of tc_split_dq's host-side plan (module04/attention_backward.hpp): the number of
// splits S (tc_split_dq_splits: whole waves, the K/V tile count, the memory cap), the
// serpentine dealing of K/V tiles to splits (tc_split_dq_tile: every tile once, balanced
// causal work), the workspace size that uses the same S as the launch, and the query walk of
// every tensor-core block (tc_walk_tiles: each query tile once, every row it reads inside the
// workspace's padding, tc_backward_padded_rows). No GPU needed:
// without a device tc_backward_block_slots() falls back to kTcSplitDqFallbackSms.

#include "module04/attention_backward.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace {

namespace m04 = course::m04;
using m04::AttentionBackwardStep;

/// The K/V tiles split `split` walks, in its order (the kernel's loop).
std::vector<std::int64_t> tiles_of(std::int64_t split, std::int64_t splits, std::int64_t kv_tiles) {
  std::vector<std::int64_t> out;
  for (std::int64_t round = 0;; ++round) {
    const std::int64_t t = m04::tc_split_dq_tile(split, round, splits);
    if (t >= kv_tiles) break;
    out.push_back(t);
  }
  return out;
}

/// Query tiles (64 rows) a K/V tile of 128 keys visits per query head, as the kernel counts
/// them (first_query_tile), causal, N_q = N_k.
std::int64_t causal_work(std::int64_t kv_tile, std::int64_t seq) {
  const std::int64_t q_tiles = (seq + m04::kTcBackwardQTile - 1) / m04::kTcBackwardQTile;
  const std::int64_t first_row = kv_tile * m04::kTcBackwardKeyTile;  // causal offset 0
  return q_tiles - first_row / m04::kTcBackwardQTile;
}

TEST(TcSplitDqPlan, EveryKvTileGoesToExactlyOneSplitInAscendingOrder) {
  for (std::int64_t kv_tiles = 1; kv_tiles <= 70; ++kv_tiles)
    for (std::int64_t splits = 1; splits <= kv_tiles; ++splits) {
      std::vector<int> seen(static_cast<std::size_t>(kv_tiles), 0);
      std::int64_t fewest = kv_tiles, most = 0;
      for (std::int64_t s = 0; s < splits; ++s) {
        const auto list = tiles_of(s, splits, kv_tiles);
        EXPECT_TRUE(std::is_sorted(list.begin(), list.end())) << kv_tiles << " tiles, split " << s << " of " << splits;
        for (const std::int64_t t : list) ++seen[static_cast<std::size_t>(t)];
        fewest = std::min<std::int64_t>(fewest, static_cast<std::int64_t>(list.size()));
        most = std::max<std::int64_t>(most, static_cast<std::int64_t>(list.size()));
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }))
          << kv_tiles << " tiles over " << splits << " splits";
      EXPECT_LE(most - fewest, 1) << kv_tiles << " tiles over " << splits << " splits";
    }
}

TEST(TcSplitDqPlan, SerpentineDealingBalancesCausalWork) {
  // Causal, N = 16384: tile j visits 256 - 2j query tiles. Round-robin (s, s + S, ...) gives
  // split 0 the heaviest tile of every round; the serpentine order pairs heavy with light.
  const std::int64_t seq = 16384, kv_tiles = seq / m04::kTcBackwardKeyTile;
  for (const std::int64_t splits : {2, 3, 4, 5, 8, 16}) {
    std::vector<std::int64_t> work(static_cast<std::size_t>(splits), 0), robin(work);
    for (std::int64_t s = 0; s < splits; ++s) {
      for (const std::int64_t t : tiles_of(s, splits, kv_tiles)) work[static_cast<std::size_t>(s)] += causal_work(t, seq);
      for (std::int64_t t = s; t < kv_tiles; t += splits) robin[static_cast<std::size_t>(s)] += causal_work(t, seq);
    }
    const auto spread = [](const std::vector<std::int64_t>& w) {
      const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
      return static_cast<double>(*hi - *lo) / static_cast<double>(std::accumulate(w.begin(), w.end(), 0LL)) *
             static_cast<double>(w.size());
    };
    // At most one tile's work (2 query tiles per split index) apart: < 2% of a split's share here.
    EXPECT_LT(spread(work), 0.02) << splits << " splits";
    EXPECT_LE(spread(work), spread(robin)) << splits << " splits";
  }
}

TEST(TcSplitDqPlan, SplitsFillWholeWavesAtTheBenchmarkShapes) {
  // B*N = 16384, H*d = 2048 on 132 SMs, one block per SM: S * B*H stays at most 132 where a
  // wave of 128 blocks is possible (the lesson's and the kernel banner's numbers).
  struct Row {
    std::int64_t d, seq, splits;
  };
  const Row rows[] = {{128, 1024, 1}, {128, 2048, 1}, {128, 4096, 2}, {128, 8192, 4}, {128, 16384, 8},
                      {64, 1024, 1},  {64, 2048, 1},  {64, 4096, 1},  {64, 8192, 2},  {64, 16384, 4}};
  for (const Row& r : rows) {
    const std::int64_t batch = 16384 / r.seq, heads = 2048 / r.d;
    const std::size_t copy = static_cast<std::size_t>(batch * heads * r.seq * r.d) * sizeof(float);
    EXPECT_EQ(m04::tc_split_dq_splits(r.seq / m04::kTcBackwardKeyTile, batch * heads, 132, copy), r.splits)
        << "d = " << r.d << ", N = " << r.seq;
  }
}

TEST(TcSplitDqPlan, SplitsRespectTheTileCountTheMemoryCapAndWaves) {
  // Never more splits than K/V tiles; one tile or no slots: one split.
  EXPECT_EQ(m04::tc_split_dq_splits(1, 1, 132, 1024), 1);
  EXPECT_EQ(m04::tc_split_dq_splits(3, 1, 132, 1024), 3);
  EXPECT_EQ(m04::tc_split_dq_splits(64, 4, 0, 1024), 1);
  // 16 heads, 128 tiles: 8 splits fill 128 of 132 slots; 9 would start a second wave.
  EXPECT_EQ(m04::tc_split_dq_splits(128, 16, 132, 1024), 8);
  EXPECT_LT(m04::tc_split_dq_cost(8, 128, 16, 132), m04::tc_split_dq_cost(9, 128, 16, 132));
  // The memory cap: copies of 300 MiB allow 3 within 1 GiB; copies above it still get one.
  const std::size_t mib = std::size_t{1} << 20;
  EXPECT_EQ(m04::tc_split_dq_splits(128, 16, 132, 300 * mib), 3);
  EXPECT_EQ(m04::tc_split_dq_splits(128, 1, 132, 2048 * mib), 1);
  // 67 heads: one split leaves half the GPU idle; whole waves need more.
  const std::int64_t s67 = m04::tc_split_dq_splits(32, 67, 132, 1024);
  EXPECT_GT(s67, 1);
  EXPECT_LT(m04::tc_split_dq_cost(s67, 32, 67, 132), m04::tc_split_dq_cost(1, 32, 67, 132));
  // Many heads: already more blocks than slots.
  EXPECT_EQ(m04::tc_split_dq_splits(32, 128, 132, 1024), 1);
  // Always within 1 <= S <= kv_tiles, and S copies within the cap unless S = 1.
  for (std::int64_t kv_tiles : {1, 2, 7, 33, 128, 1000})
    for (std::int64_t heads : {1, 3, 16, 67, 131, 132, 500})
      for (std::size_t copy : {std::size_t{4096}, 100 * mib, 700 * mib}) {
        const std::int64_t s = m04::tc_split_dq_splits(kv_tiles, heads, 132, copy);
        EXPECT_GE(s, 1);
        EXPECT_LE(s, kv_tiles);
        if (s > 1) {
          EXPECT_LE(static_cast<std::size_t>(s) * copy, m04::kTcSplitDqMaxBytes);
        }
      }
}

TEST(TcSplitDqPlan, WorkspaceUsesTheLaunchesSplitCount) {
  m04::AttentionBackwardArgsBf16 a;
  a.batch = 2;
  a.heads = 8;
  a.kv_heads = 2;
  a.seq_q = 300;
  a.seq_k = 1000;
  a.head_dim = 64;
  const std::int64_t splits = m04::tc_split_dq_plan(a);
  const std::int64_t kv_tiles = (a.seq_k + m04::kTcBackwardKeyTile - 1) / m04::kTcBackwardKeyTile;
  ASSERT_GE(splits, 1);
  ASSERT_LE(splits, kv_tiles);
  const std::size_t copy = static_cast<std::size_t>(a.batch * a.heads * a.seq_q * a.head_dim) * sizeof(float);
  EXPECT_EQ(splits, m04::tc_split_dq_splits(kv_tiles, a.batch * a.kv_heads, m04::tc_backward_block_slots(), copy));
  const m04::TcBackwardWorkspace split = m04::tc_backward_workspace(AttentionBackwardStep::tc_split_dq, a);
  const m04::TcBackwardWorkspace one = m04::tc_backward_workspace(AttentionBackwardStep::tc_pipelined, a);
  EXPECT_EQ(split.dq, one.dq);
  EXPECT_EQ(split.sem - split.dq, static_cast<std::size_t>(splits) * copy);
  EXPECT_EQ(one.sem - one.dq, copy);
  EXPECT_EQ(m04::attention_backward_workspace_bytes(AttentionBackwardStep::tc_split_dq, a), split.bytes);
  // tc_wgmma_split_dq: the same plan, the same copies.
  EXPECT_EQ(m04::attention_backward_workspace_bytes(AttentionBackwardStep::tc_wgmma_split_dq, a), split.bytes);
  EXPECT_EQ(split.bytes, m04::tc_backward_workspace(AttentionBackwardStep::tc_split_dq, a.batch, a.heads, a.seq_q,
                                                    a.head_dim, splits)
                             .bytes);
  // The other steps ignore kv_heads and the device.
  EXPECT_EQ(one.bytes,
            m04::tc_backward_workspace(AttentionBackwardStep::tc_pipelined, a.batch, a.heads, a.seq_q, a.head_dim).bytes);
  // Sizes validation rejects give one split, not a throw.
  a.kv_heads = 0;
  EXPECT_EQ(m04::tc_split_dq_plan(a), 1);
}

TEST(TcSplitDqPlan, FirstTileOfEachSplitStoresEveryRowItsLaterTilesAdd) {
  // The split steps do not zero their dQ copies: each split's first pass (round 0) stores,
  // the later ones add, and the sum skips copy s before tc_split_dq_first_tile. That needs
  // round 0's tile to start at or before every later tile of the split, and the first tiles
  // to grow with s (the sum reads copies 0.. while they cover the row).
  for (const bool causal : {false, true})
    for (std::int64_t kv_tiles = 1; kv_tiles <= 40; ++kv_tiles)
      for (std::int64_t splits = 1; splits <= kv_tiles; ++splits)
        for (const int offset : {-300, -64, -1, 0, 1, 63, 64, 127, 200, 1000}) {
          int previous = -1;
          for (std::int64_t s = 0; s < splits; ++s) {
            const int first = m04::tc_split_dq_first_tile(causal, static_cast<int>(s), offset);
            const auto tiles = tiles_of(s, splits, kv_tiles);
            ASSERT_FALSE(tiles.empty());
            EXPECT_EQ(tiles.front(), s);
            for (const std::int64_t t : tiles)
              EXPECT_LE(first, m04::tc_first_query_tile(causal, static_cast<int>(t) * m04::kTcBackwardKeyTile, offset))
                  << "split " << s << " of " << splits << ", K/V tile " << t << ", offset " << offset;
            EXPECT_GE(first, previous) << "split " << s << ", offset " << offset;
            previous = first;
          }
        }
}

/// The turn steps' order of dQ additions (tc_dq_turn_place) against the blocks' causal walk
/// (tc_first_query_tile), on every shape up to 1300 x 1300 in steps of 7 (every causal offset,
/// positive and negative, and partial tiles at both ends): the key tiles that visit a query
/// tile are 0 .. last with no gap, their places are exactly 0 .. count - 1, and each block
/// waits for key tile j + 1, which the kernels start first (shortest first). Without the mask
/// the place is the key tile itself.
TEST(TcTurnOrder, CausalPlacesFollowTheArrivalsAndWaitOnlyForTheNextKeyTile) {
  const int kQ = m04::kTcBackwardQTile, kK = m04::kTcBackwardKeyTile;
  for (int seq_q = 1; seq_q <= 1300; seq_q += 7) {
    for (int seq_k = 1; seq_k <= 1300; seq_k += 7) {
      const int q_tiles = (seq_q + kQ - 1) / kQ, kv_tiles = (seq_k + kK - 1) / kK, offset = seq_k - seq_q;
      for (int q = 0; q < q_tiles; ++q) {
        std::vector<int> visitors;
        for (int j = 0; j < kv_tiles; ++j)
          if (m04::tc_first_query_tile(true, j * kK, offset) <= q) visitors.push_back(j);
        for (std::size_t i = 0; i < visitors.size(); ++i)
          ASSERT_EQ(visitors[i], static_cast<int>(i)) << "seq_q " << seq_q << ", seq_k " << seq_k << ", query tile " << q;
        const int count = static_cast<int>(visitors.size());
        for (int j = 0; j < count; ++j) {
          const int place = m04::tc_dq_turn_place(true, j, q, kv_tiles, offset);
          ASSERT_EQ(place, count - 1 - j) << "seq_q " << seq_q << ", seq_k " << seq_k << ", query tile " << q
                                          << ", key tile " << j;
          // The block a turn waits for (place - 1) is key tile j + 1, which arrives first:
          // from its own diagonal it needs fewer steps to reach q.
          if (place > 0) {
            ASSERT_LE(q - m04::tc_first_query_tile(true, (j + 1) * kK, offset), q - m04::tc_first_query_tile(true, j * kK, offset));
          }
        }
      }
      ASSERT_EQ(m04::tc_dq_turn_place(false, 3, 0, kv_tiles, offset), 3);
      ASSERT_EQ(m04::tc_first_query_tile(false, 5 * kK, offset), 0);
    }
  }
}

TEST(TcQueryWalk, CoversEveryQueryTileOnceAndReadsInsideThePadding) {
  // A block of key tile j walks tc_walk_tiles(first, q_tiles, span) tiles of span * 64 rows
  // from host tile first (span 2: the 128-row tiles of d = 64). Causal, first is the tile of
  // the first row that sees key 128 j, which may be odd: the last tile then reaches 64 rows
  // past the last whole 64-row tile, and its lse and D must still come from the padding.
  const int q = m04::kTcBackwardQTile, kk = m04::kTcBackwardKeyTile;
  for (const int span : {1, 2})
    for (const bool causal : {false, true})
      for (int seq_q = 1; seq_q <= 520; ++seq_q)
        for (int seq_k = 1; seq_k <= 520; seq_k += causal ? 1 : 37) {
          const int q_tiles = (seq_q + q - 1) / q, offset = seq_k - seq_q;
          const std::int64_t padded = m04::tc_backward_padded_rows(seq_q);
          for (int kv = 0; kv * kk < seq_k; ++kv) {
            const int first = m04::tc_first_query_tile(causal, kv * kk, offset);
            const int n = m04::tc_walk_tiles(first, q_tiles, span);
            std::vector<int> visits(static_cast<std::size_t>(q_tiles), 0);
            for (int i = 0; i < n; ++i)
              for (int t = first + span * i; t < first + span * (i + 1) && t < q_tiles; ++t) ++visits[t];
            for (int t = 0; t < q_tiles; ++t) {
              ASSERT_EQ(visits[t], t >= first ? 1 : 0)
                  << "span " << span << (causal ? " causal" : "") << " N_q " << seq_q << " N_k " << seq_k << " key tile "
                  << kv << " query tile " << t;
            }
            if (n > 0) {
              ASSERT_LE((first + span * n) * static_cast<std::int64_t>(q), padded)
                  << "span " << span << (causal ? " causal" : "") << " N_q " << seq_q << " N_k " << seq_k
                  << " key tile " << kv << ": the last tile reads past the padded rows";
            }
          }
        }
  // The case the fuzz test found (N_q = 193, N_k = 257, causal): key tile 2 starts at query
  // tile 3, and its 128-row tile reads rows 192..319. Rounding N_q up to 128 rows (256) was
  // not enough.
  EXPECT_EQ(m04::tc_first_query_tile(true, 2 * kk, 257 - 193), 3);
  EXPECT_GE(m04::tc_backward_padded_rows(193), 320);
}

TEST(TcQueryWalk, StepsVisitWhatTheDivisionWould) {
  // The kernels carry (head, tile) and call tc_walk_step once per iteration; iteration it must
  // land where dividing it by the tiles per head puts it, across every head of the group.
  for (const int span : {1, 2})
    for (const int group : {1, 3})
      for (int q_tiles = 1; q_tiles <= 9; ++q_tiles)
        for (int first = 0; first < q_tiles; ++first) {
          SCOPED_TRACE(testing::Message() << "span " << span << " group " << group << " q_tiles " << q_tiles
                                          << " first " << first);
          const int per_head = m04::tc_walk_tiles(first, q_tiles, span);
          const int last = first + span * (per_head - 1), head0 = 5 * group;
          int head = head0, tile = first;
          for (int it = 0; it < per_head * group; ++it) {
            ASSERT_EQ(head, head0 + it / per_head) << "iteration " << it;
            ASSERT_EQ(tile, first + span * (it % per_head)) << "iteration " << it;
            m04::tc_walk_step(head, tile, first, last, span);
          }
          EXPECT_EQ(head, head0 + group);  // one past the group, at its first tile
          EXPECT_EQ(tile, first);
        }
}

}  // namespace
