// CPU tests of the causal block order (module03/block_order.hpp): grouped_causal_tile, which
// the Hopper forward steps (query tiles, longest first) and the tensor-core backward steps
// (key tiles, longest first) take their work from, and causal_group_heads, which sizes the
// groups. The GPU tests meet only one group at their small head counts; here every shape up
// to 40 tiles x 40 heads, every group size, is walked block by block.

#include "module03/block_order.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace {

using course::m03::causal_group_heads;
using course::m03::grouped_causal_tile;
using course::m03::GroupedTile;

TEST(BlockOrder, EveryTileOnceAndEachHeadsTilesInRankOrder) {
  for (int tiles = 1; tiles <= 40; ++tiles) {
    for (int heads = 1; heads <= 40; ++heads) {
      for (int group = 1; group <= heads; ++group) {
        SCOPED_TRACE(::testing::Message() << tiles << " tiles, " << heads << " heads, groups of " << group);
        std::vector<long long> seen(static_cast<std::size_t>(tiles) * heads, -1);  // linear number per (head, rank)
        for (long long linear = 0; linear < static_cast<long long>(tiles) * heads; ++linear) {
          const GroupedTile g = grouped_causal_tile(linear, tiles, heads, group);
          ASSERT_GE(g.rank, 0);
          ASSERT_LT(g.rank, tiles);
          ASSERT_GE(g.head, 0);
          ASSERT_LT(g.head, heads);
          long long& slot = seen[static_cast<std::size_t>(g.head) * tiles + g.rank];
          ASSERT_EQ(slot, -1) << "rank " << g.rank << " of head " << g.head << " handed out twice";
          slot = linear;
          // A group's blocks come before the next group's: the running blocks span few heads.
          ASSERT_EQ(g.head / group, linear / (static_cast<long long>(group) * tiles));
        }
        // The deterministic backward waits for (rank - 1, head): it must have started earlier.
        for (int h = 0; h < heads; ++h)
          for (int r = 1; r < tiles; ++r)
            ASSERT_LT(seen[static_cast<std::size_t>(h) * tiles + r - 1], seen[static_cast<std::size_t>(h) * tiles + r]);
      }
    }
  }
}

TEST(BlockOrder, OneGroupIsLongestFirstOverAllHeads) {
  // group = heads: rank is linear / heads, the head linear % heads (the fp32 backward's order).
  const int tiles = 7, heads = 5;
  for (long long linear = 0; linear < tiles * heads; ++linear) {
    const GroupedTile g = grouped_causal_tile(linear, tiles, heads, heads);
    EXPECT_EQ(g.rank, linear / heads);
    EXPECT_EQ(g.head, linear % heads);
  }
}

TEST(BlockOrder, GroupsHoldAboutTwoWaves) {
  EXPECT_EQ(causal_group_heads(16, 128, 132), 17);  // 17 x 16 = 272 >= 2 x 132 blocks
  EXPECT_EQ(causal_group_heads(128, 16, 132), 3);   // long rows: a few heads
  EXPECT_EQ(causal_group_heads(1000, 16, 132), 1);  // at least one head
  EXPECT_EQ(causal_group_heads(2, 8, 132), 8);      // at most every head
  for (long long tiles : {1, 3, 16, 64, 256})
    for (long long heads : {1, 7, 64, 512}) {
      const int g = causal_group_heads(tiles, heads, 132);
      EXPECT_GE(g, 1);
      EXPECT_LE(g, heads);
      if (g < heads) {
        EXPECT_GE(g * tiles, 2 * 132) << tiles << " tiles, " << heads << " heads";
      }
    }
}

}  // namespace
