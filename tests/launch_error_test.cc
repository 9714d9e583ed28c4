// How kernel launches read their error, without a GPU: the policy template
// of libgeeps' kernels (src/device/cuda/launch_error.h, used by kernels.cu's
// Launch, so also by gpu_bench's LaunchSpin) and of the example layers' CUDA
// backend (examples/layers/cuda_launch.h), driven by a fake runtime of the
// same shape as CUDA's: a per-thread "last error" that every failed call
// latches and that TakeLastError (cudaGetLastError) returns and clears, and a
// launch that returns its own error (cudaLaunchKernelEx). A stale error
// latched before a launch must never be reported as the launch's error, and
// a failed launch must be reported and then cleared.
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <utility>

#include "cuda_launch.h"  // examples/layers
#include "device/cuda/launch_error.h"

namespace geeps {
namespace {

enum FakeError { kSuccess = 0, kOutOfMemory = 2, kInvalidConfiguration = 9 };

// The runtime's per-thread last error, and a launch that returns `result`
// and latches it when it fails, as the CUDA runtime does.
struct FakeRuntime {
  FakeError last = kSuccess;
  int launches = 0;
  int takes = 0;

  FakeError Launch(FakeError result) {
    ++launches;
    if (result != kSuccess) last = result;
    return result;
  }
  FakeError TakeLastError() {
    ++takes;
    const FakeError e = last;
    last = kSuccess;
    return e;
  }
};

// The two copies of the policy, one type each.
struct LibraryPolicy {
  template <typename... A>
  static FakeError Run(A&&... a) {
    return device::cuda::OwnLaunchError(std::forward<A>(a)...);
  }
};
struct ExamplePolicy {
  template <typename... A>
  static FakeError Run(A&&... a) {
    return nn::OwnLaunchError(std::forward<A>(a)...);
  }
};

template <typename Policy>
class LaunchErrorTest : public ::testing::Test {
 protected:
  // One launch through the policy that fails with `result` (or succeeds).
  FakeError LaunchWith(FakeError result) {
    return Policy::Run(
        kSuccess, [&] { return runtime_.Launch(result); },
        [&] { return runtime_.TakeLastError(); });
  }

  FakeRuntime runtime_;
};

using Policies = ::testing::Types<LibraryPolicy, ExamplePolicy>;
class PolicyNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, LibraryPolicy> ? "Library" : "ExampleLayers";
  }
};
TYPED_TEST_SUITE(LaunchErrorTest, Policies, PolicyNames);

// A handled allocation failure left latched is not the kernel's error; it
// is not the launch's to clear either.
TYPED_TEST(LaunchErrorTest, AStaleErrorIsNotTheLaunchsError) {
  this->runtime_.last = kOutOfMemory;
  EXPECT_EQ(this->LaunchWith(kSuccess), kSuccess);
  EXPECT_EQ(this->runtime_.launches, 1);
  EXPECT_EQ(this->runtime_.last, kOutOfMemory);
}

TYPED_TEST(LaunchErrorTest, AFailedLaunchIsReportedAndCleared) {
  EXPECT_EQ(this->LaunchWith(kInvalidConfiguration), kInvalidConfiguration);
  EXPECT_EQ(this->runtime_.last, kSuccess) << "the launch's error is still latched";
  // The next launch succeeds and says so.
  EXPECT_EQ(this->LaunchWith(kSuccess), kSuccess);
}

TYPED_TEST(LaunchErrorTest, AFailedLaunchAfterAStaleErrorReportsItsOwn) {
  this->runtime_.last = kOutOfMemory;
  EXPECT_EQ(this->LaunchWith(kInvalidConfiguration), kInvalidConfiguration);
  EXPECT_EQ(this->runtime_.last, kSuccess);
}

// A successful launch costs no extra runtime call.
TYPED_TEST(LaunchErrorTest, ASuccessfulLaunchReadsNoLastError) {
  EXPECT_EQ(this->LaunchWith(kSuccess), kSuccess);
  EXPECT_EQ(this->runtime_.takes, 0);
}

}  // namespace
}  // namespace geeps
