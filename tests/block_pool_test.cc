// BlockPool, the caching allocator under the CUDA backend's device and pinned
// memory, over a fake raw allocator (so it runs on every machine).
#include "device/block_pool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace geeps::device {
namespace {

// malloc-backed raw allocator that counts calls and can run out. Like
// cudaMalloc, a failure also latches an error (`latched`, CUDA's per-thread
// "last error") that stays until the pool's clear_error hook clears it.
struct FakeRaw {
  std::map<void*, size_t> live;  // block -> bytes
  int allocations = 0;
  int failures = 0;
  int frees = 0;
  int fail_next = 0;           // fail this many calls, whatever the size
  size_t capacity = SIZE_MAX;  // bytes the fake may hand out in total
  size_t used = 0;
  bool latched = false;  // a failure not yet cleared
  int clears = 0;        // calls of the hook
  // Calls of the raw allocator when the hook ran last (-1: never).
  int calls_at_last_clear = -1;

  int calls() const { return allocations + failures; }

  BlockPool Make(uint64_t budget, bool with_hook = true) {
    BlockPool::ClearError hook;
    if (with_hook) {
      hook = [this] {
        latched = false;
        ++clears;
        calls_at_last_clear = calls();
      };
    }
    return BlockPool(
        "test pool", budget,
        [this](size_t bytes) -> StatusOr<void*> {
          if (fail_next > 0 || bytes > capacity - used) {
            if (fail_next > 0) --fail_next;
            latched = true;
            ++failures;
            return ResourceExhaustedError("fake: out of memory");
          }
          void* p = std::malloc(bytes);
          live[p] = bytes;
          used += bytes;
          ++allocations;
          return p;
        },
        [this](void* p) {
          used -= live[p];
          live.erase(p);
          std::free(p);
          ++frees;
        },
        std::move(hook));
  }
};

TEST(BlockPoolTest, ClassSizes) {
  EXPECT_EQ(BlockPool::ClassSize(0), BlockPool::kMinBlock);
  EXPECT_EQ(BlockPool::ClassSize(1), 256u);
  EXPECT_EQ(BlockPool::ClassSize(256), 256u);
  EXPECT_EQ(BlockPool::ClassSize(257), 320u);
  EXPECT_EQ(BlockPool::ClassSize(1000), 1024u);
  EXPECT_EQ(BlockPool::ClassSize(1025), 1280u);
  for (size_t bytes : {size_t{3000}, size_t{1} << 20, (size_t{1} << 30) + 1}) {
    const size_t c = BlockPool::ClassSize(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(c, bytes + bytes / 4 + 1) << bytes;
  }
  EXPECT_EQ(BlockPool::ClassSize(SIZE_MAX), SIZE_MAX);
}

TEST(BlockPoolTest, ReusesFreedBlocksWithoutTheRawAllocator) {
  FakeRaw raw;
  {
    BlockPool pool = raw.Make(0);
    std::vector<void*> blocks;
    for (int i = 0; i < 3; ++i) blocks.push_back(*pool.Allocate(1000));
    EXPECT_EQ(raw.allocations, 3);
    EXPECT_EQ(pool.bytes_in_use(), 3000u);
    for (void* p : blocks) EXPECT_TRUE(pool.Free(p));
    EXPECT_EQ(pool.bytes_in_use(), 0u);
    EXPECT_EQ(pool.bytes_cached(), 3 * 1024u);
    EXPECT_EQ(raw.frees, 0);  // Free never calls the raw free
    // The same sizes again, as every training iteration does.
    for (int round = 0; round < 10; ++round) {
      void* a = *pool.Allocate(1000);
      void* b = *pool.Allocate(1020);  // same class
      EXPECT_TRUE(pool.Free(a));
      EXPECT_TRUE(pool.Free(b));
    }
    EXPECT_EQ(raw.allocations, 3);
    EXPECT_EQ(pool.raw_allocations(), 3u);
    EXPECT_FALSE(pool.Free(&raw));  // unknown pointer
    void* z1 = *pool.Allocate(0);
    void* z2 = *pool.Allocate(0);
    EXPECT_NE(z1, z2);
  }
  EXPECT_TRUE(raw.live.empty());  // the destructor gives everything back
}

TEST(BlockPoolTest, BudgetCountsRequestedBytes) {
  FakeRaw raw;
  BlockPool pool = raw.Make(1024);
  StatusOr<void*> a = pool.Allocate(1000);
  ASSERT_TRUE(a.ok());
  StatusOr<void*> b = pool.Allocate(100);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  const std::string& m = b.status().message();
  EXPECT_NE(m.find("requested 100 bytes, in use 1000 bytes, budget 1024 bytes"), std::string::npos)
      << m;
  StatusOr<void*> fits = pool.Allocate(24);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(pool.bytes_in_use(), 1024u);
  pool.Free(*a);
  pool.Free(*fits);
  EXPECT_TRUE(pool.Allocate(1024).ok());
  EXPECT_FALSE(pool.Allocate(SIZE_MAX).ok());
}

TEST(BlockPoolTest, RawFailureReleasesTheCacheAndRetries) {
  FakeRaw raw;
  raw.capacity = 4096;
  BlockPool pool = raw.Make(0);
  void* small = *pool.Allocate(2048);
  pool.Free(small);  // cached: 2048 of the fake's 4096 bytes
  StatusOr<void*> big = pool.Allocate(4096);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(raw.frees, 1);
  EXPECT_EQ(pool.bytes_cached(), 0u);
  StatusOr<void*> none = pool.Allocate(300);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("fake: out of memory"), std::string::npos);
}

// A raw failure that the retry recovers from must leave no error behind: the
// hook runs right after the failed call (before the retry) and only then.
TEST(BlockPoolTest, HandledRawFailureClearsTheError) {
  FakeRaw raw;
  BlockPool pool = raw.Make(0);
  void* cached = *pool.Allocate(1000);
  ASSERT_TRUE(pool.Free(cached));  // so that a failure is retried
  EXPECT_EQ(raw.clears, 0);        // successes never call the hook

  raw.fail_next = 1;  // the first try fails, the retry succeeds
  StatusOr<void*> p = pool.Allocate(5000);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(raw.failures, 1);
  EXPECT_EQ(raw.allocations, 2);
  EXPECT_FALSE(raw.latched) << "the handled failure stayed latched";
  EXPECT_EQ(raw.clears, 1);
  // Cleared between the failed call (call 2) and the retry (call 3).
  EXPECT_EQ(raw.calls_at_last_clear, 2);

  // A failure returned to the caller is handled too: both tries cleared.
  void* again = *pool.Allocate(1000);
  ASSERT_TRUE(pool.Free(again));
  raw.fail_next = 2;
  StatusOr<void*> none = pool.Allocate(6000);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(raw.latched);
  EXPECT_EQ(raw.clears, 3);
  EXPECT_EQ(raw.calls_at_last_clear, raw.calls());

  // Without a cached block there is no retry; the one failure is cleared.
  raw.fail_next = 1;
  EXPECT_FALSE(pool.Allocate(7000).ok());
  EXPECT_FALSE(raw.latched);
  EXPECT_EQ(raw.clears, 4);

  // Cached blocks and successful raw allocations never call it.
  for (int i = 0; i < 3; ++i) {
    void* block = *pool.Allocate(5000);
    ASSERT_TRUE(pool.Free(block));
    ASSERT_TRUE(pool.Allocate(100000).ok());
  }
  EXPECT_EQ(raw.clears, 4);
  pool.Free(*p);
}

// Without a hook (a raw allocator that leaves no error) the pool works the
// same; the fake's failure then stays latched, as the test above would see.
TEST(BlockPoolTest, NoHookLeavesTheErrorToTheRawAllocator) {
  FakeRaw raw;
  BlockPool pool = raw.Make(0, /*with_hook=*/false);
  raw.fail_next = 1;
  EXPECT_FALSE(pool.Allocate(1000).ok());
  EXPECT_TRUE(raw.latched);
  EXPECT_EQ(raw.clears, 0);
  EXPECT_TRUE(pool.Allocate(1000).ok());
}

}  // namespace
}  // namespace geeps::device
