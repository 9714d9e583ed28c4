// Conformance suite of the device layer: every backend must pass DeviceTest.
// A new backend adds an INSTANTIATE_TEST_SUITE_P at the bottom. HostDeviceTest
// covers what only the host backend promises (its extra checks).
#include "device/device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "device/host/host_device.h"
#include "test_util.h"

namespace geeps::device {
namespace {

// Floats that are small integers, so that sums in tests are exact.
std::vector<float> RandomFloats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-1000, 1000);
  std::vector<float> values(count);
  for (float& v : values) v = static_cast<float>(dist(rng));
  return values;
}

// `n` distinct row indexes out of [0, rows), in random order.
std::vector<uint32_t> DistinctIndexes(size_t n, size_t rows, uint32_t seed) {
  std::vector<uint32_t> all(rows);
  std::iota(all.begin(), all.end(), 0u);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  all.resize(n);
  return all;
}

// Reports the first mismatch only (vectors here can be large).
void ExpectFloatsEq(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] != expected[i]) {
      ADD_FAILURE() << "first mismatch at [" << i << "]: " << actual[i] << " != expected "
                    << expected[i];
      return;
    }
  }
}

class DeviceTest : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Device>> device = MakeDevice(DeviceOptions());
    if (!device.ok()) {
      if (GetParam() == DeviceKind::kCuda && device.status().code() == StatusCode::kUnavailable) {
        // "no CUDA device: <cudaGetDeviceCount error>" or "CUDA backend not
        // built: ...".
        GTEST_SKIP() << device.status().message();
      }
      FAIL() << device.status();
    }
    device_ = std::move(device).value();
    stream_ = NewStream();
  }

  void TearDown() override {
    if (device_ == nullptr) return;
    if (stream_ != nullptr) {
      EXPECT_TRUE(device_->Synchronize(stream_.get()).ok());
    }
    for (void* p : allocations_) device_->Free(p);
  }

  // The host backend runs in its asynchronous mode here: by default it runs
  // an operation on an idle stream inside the call (HostDeviceTest covers
  // that), which would let this suite's ordering checks pass without any
  // ordering. Asynchronous, every operation runs later on the stream's
  // thread, as on a GPU.
  StatusOr<std::unique_ptr<Device>> MakeDevice(DeviceOptions options) {
    if (GetParam() == DeviceKind::kHost) options.async_streams = true;
    return CreateDevice(GetParam(), options);
  }

  std::unique_ptr<Stream> NewStream() {
    StatusOr<std::unique_ptr<Stream>> stream = device_->CreateStream();
    EXPECT_TRUE(stream.ok()) << stream.status();
    return stream.ok() ? std::move(stream).value() : nullptr;
  }

  std::unique_ptr<Event> NewEvent() {
    StatusOr<std::unique_ptr<Event>> event = device_->CreateEvent();
    EXPECT_TRUE(event.ok()) << event.status();
    return event.ok() ? std::move(event).value() : nullptr;
  }

  // Device memory freed in TearDown; never empty (a 0-byte cudaMalloc may
  // return nullptr, which kernels reject).
  template <typename T>
  T* Alloc(size_t count) {
    StatusOr<void*> p = device_->Allocate(std::max<size_t>(count, 1) * sizeof(T));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    allocations_.push_back(*p);
    return static_cast<T*>(*p);
  }

  // Device copy of `values` (synchronous).
  template <typename T>
  T* Upload(const std::vector<T>& values) {
    T* p = Alloc<T>(values.size());
    if (!values.empty()) {
      EXPECT_TRUE(device_
                      ->Copy(p, values.data(), values.size() * sizeof(T), CopyKind::kHostToDevice,
                             stream_.get())
                      .ok());
    }
    EXPECT_TRUE(device_->Synchronize(stream_.get()).ok());
    return p;
  }

  std::vector<float> Download(const float* p, size_t count, Stream* stream = nullptr) {
    if (stream == nullptr) stream = stream_.get();
    std::vector<float> values(count);
    if (count > 0) {
      Status s =
          device_->Copy(values.data(), p, count * sizeof(float), CopyKind::kDeviceToHost, stream);
      EXPECT_TRUE(s.ok()) << s;
    }
    Status s = device_->Synchronize(stream);
    EXPECT_TRUE(s.ok()) << s;
    return values;
  }

  // Enqueues `adds` additions of 1 to each of `count` floats at `p`: a chain
  // slow enough (tens of ms) that what is queued behind it has not run yet.
  void EnqueueSlowChain(float* p, const float* ones, size_t count, int adds, Stream* stream) {
    for (int i = 0; i < adds; ++i) {
      ASSERT_OK(device_->Add(p, ones, count, stream));
    }
  }

  // The chain must outlast the few microseconds between enqueuing it and
  // checking EventDone(), also on a GPU (where 4 MiB adds take microseconds).
  size_t SlowCount() const {
    return GetParam() == DeviceKind::kHost ? size_t{1} << 20 : size_t{1} << 26;
  }
  static constexpr int kSlowAdds = 64;

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;  // destroyed before device_
  std::vector<void*> allocations_;
};

TEST_P(DeviceTest, AllocateAndFree) {
  EXPECT_EQ(device_->kind() == DeviceKind::kCuda, GetParam() == DeviceKind::kCuda);
  EXPECT_FALSE(device_->name().empty());
  const uint64_t before = device_->bytes_in_use();
  StatusOr<void*> a = device_->Allocate(1000);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NE(*a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % alignof(float), 0u);
  EXPECT_EQ(device_->bytes_in_use(), before + 1000);
  StatusOr<void*> b = device_->Allocate(24);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(*a, *b);
  EXPECT_EQ(device_->bytes_in_use(), before + 1024);
  device_->Free(*a);
  EXPECT_EQ(device_->bytes_in_use(), before + 24);
  device_->Free(*b);
  EXPECT_EQ(device_->bytes_in_use(), before);
  device_->Free(nullptr);
  EXPECT_EQ(device_->bytes_in_use(), before);
}

TEST_P(DeviceTest, BudgetExceededAndRecovery) {
  DeviceOptions options;
  options.memory_budget = 1024;
  StatusOr<std::unique_ptr<Device>> made = MakeDevice(options);
  ASSERT_TRUE(made.ok()) << made.status();
  Device& device = **made;
  EXPECT_EQ(device.memory_budget(), 1024u);
  StatusOr<void*> a = device.Allocate(1000);
  ASSERT_TRUE(a.ok()) << a.status();
  StatusOr<void*> b = device.Allocate(100);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  const std::string& message = b.status().message();
  EXPECT_NE(message.find("100"), std::string::npos) << message;   // requested
  EXPECT_NE(message.find("1000"), std::string::npos) << message;  // in use
  EXPECT_NE(message.find("1024"), std::string::npos) << message;  // budget
  EXPECT_EQ(device.bytes_in_use(), 1000u);
  StatusOr<void*> fits = device.Allocate(24);  // exactly up to the budget
  ASSERT_TRUE(fits.ok()) << fits.status();
  device.Free(*fits);
  device.Free(*a);
  EXPECT_EQ(device.bytes_in_use(), 0u);
  StatusOr<void*> all = device.Allocate(1024);
  ASSERT_TRUE(all.ok()) << all.status();
  device.Free(*all);
}

TEST_P(DeviceTest, PinnedMemoryIsNotCounted) {
  DeviceOptions options;
  options.memory_budget = 64;
  StatusOr<std::unique_ptr<Device>> made = MakeDevice(options);
  ASSERT_TRUE(made.ok()) << made.status();
  StatusOr<void*> pinned = (*made)->AllocatePinned(4096);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  std::memset(*pinned, 7, 4096);
  EXPECT_EQ((*made)->bytes_in_use(), 0u);
  (*made)->FreePinned(*pinned);
  (*made)->FreePinned(nullptr);
}

TEST_P(DeviceTest, CopyEveryKind) {
  for (size_t count : {size_t{1}, size_t{3}, size_t{129}, size_t{100000}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    const size_t bytes = count * sizeof(float);
    const std::vector<float> source = RandomFloats(count, 1);
    StatusOr<void*> pinned = device_->AllocatePinned(bytes);
    ASSERT_TRUE(pinned.ok()) << pinned.status();
    float* a = Alloc<float>(count);
    float* b = Alloc<float>(count);
    std::vector<float> back(count), host_copy(count);
    Stream* s = stream_.get();
    ASSERT_OK(device_->Copy(*pinned, source.data(), bytes, CopyKind::kHostToHost, s));
    ASSERT_OK(device_->Copy(a, *pinned, bytes, CopyKind::kHostToDevice, s));
    ASSERT_OK(device_->Copy(b, a, bytes, CopyKind::kDeviceToDevice, s));
    ASSERT_OK(device_->Copy(back.data(), b, bytes, CopyKind::kDeviceToHost, s));
    ASSERT_OK(device_->Copy(host_copy.data(), *pinned, bytes, CopyKind::kHostToHost, s));
    ASSERT_OK(device_->Synchronize(s));
    ExpectFloatsEq(back, source);
    ExpectFloatsEq(host_copy, source);
    device_->FreePinned(*pinned);
  }
  float* a = Alloc<float>(1);  // zero-byte copies are no-ops
  float x = 5;
  ASSERT_OK(device_->Copy(a, &x, 0, CopyKind::kHostToDevice, stream_.get()));
  ASSERT_OK(device_->Synchronize(stream_.get()));
}

struct IndexedCase {
  size_t n;
  size_t width;
};

std::vector<IndexedCase> IndexedCases() {
  std::vector<IndexedCase> cases;
  for (size_t width : {1, 3, 128, 129}) {
    for (size_t n : {0, 1, 7, 300}) cases.push_back({n, width});
  }
  return cases;
}

TEST_P(DeviceTest, GatherMatchesReference) {
  for (const IndexedCase& c : IndexedCases()) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " width " + std::to_string(c.width));
    const size_t rows = c.n * 2 + 5;
    const std::vector<float> table = RandomFloats(rows * c.width, 2);
    const std::vector<uint32_t> index = DistinctIndexes(c.n, rows, 3);
    std::vector<float> expected(c.n * c.width);
    for (size_t i = 0; i < c.n; ++i) {
      std::copy_n(table.begin() + index[i] * c.width, c.width, expected.begin() + i * c.width);
    }
    float* src = Upload(table);
    uint32_t* d_index = Upload(index);
    float* dst = Alloc<float>(c.n * c.width);
    ASSERT_OK(device_->Gather(dst, src, d_index, c.n, c.width, stream_.get()));
    ExpectFloatsEq(Download(dst, c.n * c.width), expected);
  }
}

TEST_P(DeviceTest, ScatterAddMatchesReference) {
  for (const IndexedCase& c : IndexedCases()) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " width " + std::to_string(c.width));
    const size_t rows = c.n * 2 + 5;
    std::vector<float> expected = RandomFloats(rows * c.width, 4);
    const std::vector<float> updates = RandomFloats(c.n * c.width, 5);
    const std::vector<uint32_t> index = DistinctIndexes(c.n, rows, 6);
    float* dst = Upload(expected);
    float* src = Upload(updates);
    uint32_t* d_index = Upload(index);
    for (size_t i = 0; i < c.n; ++i) {
      for (size_t j = 0; j < c.width; ++j) {
        expected[index[i] * c.width + j] += updates[i * c.width + j];
      }
    }
    ASSERT_OK(device_->ScatterAdd(dst, src, d_index, c.n, c.width, stream_.get()));
    ExpectFloatsEq(Download(dst, rows * c.width), expected);
  }
}

TEST_P(DeviceTest, ScatterMatchesReference) {
  for (const IndexedCase& c : IndexedCases()) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " width " + std::to_string(c.width));
    const size_t rows = c.n * 2 + 5;
    std::vector<float> expected = RandomFloats(rows * c.width, 7);
    const std::vector<float> values = RandomFloats(c.n * c.width, 8);
    const std::vector<uint32_t> index = DistinctIndexes(c.n, rows, 9);
    float* dst = Upload(expected);
    float* src = Upload(values);
    uint32_t* d_index = Upload(index);
    for (size_t i = 0; i < c.n; ++i) {
      std::copy_n(values.begin() + i * c.width, c.width, expected.begin() + index[i] * c.width);
    }
    ASSERT_OK(device_->Scatter(dst, src, d_index, c.n, c.width, stream_.get()));
    ExpectFloatsEq(Download(dst, rows * c.width), expected);
  }
}

TEST_P(DeviceTest, AddAndFillMatchReference) {
  for (size_t count : {0, 1, 3, 128, 129, 100001}) {
    SCOPED_TRACE("count " + std::to_string(count));
    std::vector<float> expected = RandomFloats(count, 10);
    const std::vector<float> addend = RandomFloats(count, 11);
    float* dst = Upload(expected);
    float* src = Upload(addend);
    for (size_t i = 0; i < count; ++i) expected[i] += addend[i];
    ASSERT_OK(device_->Add(dst, src, count, stream_.get()));
    ExpectFloatsEq(Download(dst, count), expected);

    float* filled = Alloc<float>(count + 1);
    ASSERT_OK(device_->Fill(filled, -1.0f, count + 1, stream_.get()));
    ASSERT_OK(device_->Fill(filled, 2.5f, count, stream_.get()));
    std::vector<float> fill_expected(count + 1, 2.5f);
    fill_expected[count] = -1.0f;  // Fill writes exactly `count` floats
    ExpectFloatsEq(Download(filled, count + 1), fill_expected);
  }
}

TEST_P(DeviceTest, OneStreamRunsInOrder) {
  // Each step reads what the previous one wrote; nothing synchronises between.
  constexpr size_t kCount = 1 << 16;
  constexpr size_t kWidth = 4;
  constexpr size_t kRows = kCount / kWidth;
  float* a = Alloc<float>(kCount);
  float* b = Alloc<float>(kCount);
  std::vector<uint32_t> reverse(kRows);
  for (size_t i = 0; i < kRows; ++i) reverse[i] = kRows - 1 - i;
  uint32_t* d_reverse = Upload(reverse);
  Stream* s = stream_.get();
  ASSERT_OK(device_->Fill(a, 1.0f, kCount, s));
  for (int i = 0; i < 10; ++i) ASSERT_OK(device_->Add(a, a, kCount, s));
  ASSERT_OK(device_->Copy(b, a, kCount * sizeof(float), CopyKind::kDeviceToDevice, s));
  ASSERT_OK(device_->Add(b, a, kCount, s));                       // b = 2048
  ASSERT_OK(device_->Fill(a, 3.0f, kWidth, s));                   // row 0 = 3
  ASSERT_OK(device_->Gather(b, a, d_reverse, kRows, kWidth, s));  // reversed a
  ASSERT_OK(device_->ScatterAdd(a, b, d_reverse, kRows, kWidth, s));
  std::vector<float> expected(kCount, 2048.0f);
  std::fill_n(expected.begin(), kWidth, 6.0f);  // row 0: 3 + 3
  ExpectFloatsEq(Download(a, kCount), expected);
}

TEST_P(DeviceTest, EventOrdersTwoStreams) {
  const size_t slow_count = SlowCount();
  std::unique_ptr<Stream> b_stream = NewStream();
  std::unique_ptr<Event> event = NewEvent();
  float* x = Alloc<float>(slow_count);
  float* y = Alloc<float>(slow_count);
  float* ones = Alloc<float>(slow_count);
  Stream* a = stream_.get();
  ASSERT_OK(device_->Fill(ones, 1.0f, slow_count, a));
  ASSERT_OK(device_->Fill(x, 0.0f, slow_count, a));
  ASSERT_OK(device_->Fill(y, -1.0f, slow_count, b_stream.get()));
  EnqueueSlowChain(x, ones, slow_count, kSlowAdds, a);
  ASSERT_OK(device_->Record(event.get(), a));
  ASSERT_OK(device_->StreamWait(b_stream.get(), event.get()));
  ASSERT_OK(
      device_->Copy(y, x, slow_count * sizeof(float), CopyKind::kDeviceToDevice, b_stream.get()));
  // Only stream B is synchronised: B must have waited for A by itself.
  std::vector<float> seen = Download(y, slow_count, b_stream.get());
  EXPECT_TRUE(device_->EventDone(event.get()));
  ExpectFloatsEq(seen, std::vector<float>(slow_count, kSlowAdds));
}

TEST_P(DeviceTest, EventDone) {
  const size_t slow_count = SlowCount();
  std::unique_ptr<Event> event = NewEvent();
  EXPECT_TRUE(device_->EventDone(event.get()));  // never recorded
  ASSERT_OK(device_->EventSynchronize(event.get()));
  ASSERT_OK(device_->StreamWait(stream_.get(), event.get()));  // no wait
  float* x = Alloc<float>(slow_count);
  float* ones = Alloc<float>(slow_count);
  std::unique_ptr<Stream> other = NewStream();
  float* y = Alloc<float>(16);
  ASSERT_OK(device_->Fill(ones, 1.0f, slow_count, stream_.get()));
  ASSERT_OK(device_->Fill(x, 0.0f, slow_count, stream_.get()));
  EnqueueSlowChain(x, ones, slow_count, kSlowAdds, stream_.get());
  ASSERT_OK(device_->Record(event.get(), stream_.get()));
  EXPECT_FALSE(device_->EventDone(event.get())) << "the chain ran too fast";
  // "Not ready" is an answer, not an error: it must not turn up as the error
  // of the next kernel launch (CUDA: cudaErrorNotReady left latched).
  ASSERT_OK(device_->Fill(y, 3.0f, 16, other.get()));
  ASSERT_OK(device_->EventSynchronize(event.get()));
  EXPECT_TRUE(device_->EventDone(event.get()));
  // The event alone proves the chain ran: read x back on another stream.
  ExpectFloatsEq(Download(x, slow_count, other.get()), std::vector<float>(slow_count, kSlowAdds));
  ExpectFloatsEq(Download(y, 16, other.get()), std::vector<float>(16, 3.0f));
}

// A failed allocation is handled (a Status, after the pool's retry): its
// error must not turn up later as the error of an unrelated kernel launch
// (CUDA: a failed cudaMalloc's error left latched for cudaGetLastError()).
TEST_P(DeviceTest, FailedAllocationLeavesNoErrorBehind) {
  // A cached free block, so that the pool releases it and retries.
  float* cached = Alloc<float>(1000);
  device_->Free(cached);
  allocations_.pop_back();
  // More than any machine has: the CUDA allocator itself fails (the host
  // backend refuses it before asking the system).
  constexpr size_t kHuge = SIZE_MAX - 1;
  StatusOr<void*> huge = device_->Allocate(kHuge);
  ASSERT_FALSE(huge.ok());
  EXPECT_TRUE(huge.status().code() == StatusCode::kResourceExhausted ||
              huge.status().code() == StatusCode::kDeviceError)
      << huge.status();
  StatusOr<void*> huge_pinned = device_->AllocatePinned(kHuge);
  ASSERT_FALSE(huge_pinned.ok());
  // Every kind of launch, and the stream, still work.
  const std::vector<float> table = RandomFloats(8 * 4, 40);
  float* src = Upload(table);
  uint32_t* index = Upload(std::vector<uint32_t>{5, 2});
  float* rows = Alloc<float>(8);
  float* sum = Alloc<float>(8);
  Stream* s = stream_.get();
  ASSERT_OK(device_->Gather(rows, src, index, 2, 4, s));
  ASSERT_OK(device_->Fill(sum, 1.0f, 8, s));
  ASSERT_OK(device_->Add(sum, rows, 8, s));
  ASSERT_OK(device_->ScatterAdd(src, sum, index, 2, 4, s));
  ASSERT_OK(device_->Scatter(src, rows, index, 2, 4, s));
  ASSERT_OK(device_->Synchronize(s));
  std::vector<float> expected_rows(8);
  std::copy_n(table.begin() + 5 * 4, 4, expected_rows.begin());
  std::copy_n(table.begin() + 2 * 4, 4, expected_rows.begin() + 4);
  ExpectFloatsEq(Download(rows, 8), expected_rows);
  std::vector<float> expected_sum = expected_rows;
  for (float& v : expected_sum) v += 1.0f;
  ExpectFloatsEq(Download(sum, 8), expected_sum);
  // Scatter wrote the gathered rows back where they came from.
  ExpectFloatsEq(Download(src, table.size()), table);
  // And allocation works again.
  EXPECT_NE(Alloc<float>(1000), nullptr);
}

TEST_P(DeviceTest, ReRecordedEvent) {
  const size_t slow_count = SlowCount();
  std::unique_ptr<Stream> b_stream = NewStream();
  std::unique_ptr<Event> event = NewEvent();
  float* x = Alloc<float>(slow_count);
  float* y = Alloc<float>(slow_count);
  float* ones = Alloc<float>(slow_count);
  Stream* a = stream_.get();
  ASSERT_OK(device_->Fill(ones, 1.0f, slow_count, a));
  ASSERT_OK(device_->Fill(x, 0.0f, slow_count, a));
  ASSERT_OK(device_->Record(event.get(), a));
  ASSERT_OK(device_->EventSynchronize(event.get()));
  EXPECT_TRUE(device_->EventDone(event.get()));
  // Re-recording re-arms the event: it now marks the end of the chain.
  EnqueueSlowChain(x, ones, slow_count, kSlowAdds, a);
  ASSERT_OK(device_->Record(event.get(), a));
  EXPECT_FALSE(device_->EventDone(event.get())) << "the chain ran too fast";
  ASSERT_OK(device_->StreamWait(b_stream.get(), event.get()));
  ASSERT_OK(
      device_->Copy(y, x, slow_count * sizeof(float), CopyKind::kDeviceToDevice, b_stream.get()));
  ExpectFloatsEq(Download(y, slow_count, b_stream.get()),
                 std::vector<float>(slow_count, kSlowAdds));
  EXPECT_TRUE(device_->EventDone(event.get()));
}

TEST_P(DeviceTest, InvalidArgumentsAreRejectedSynchronously) {
  float* f = Alloc<float>(16);
  uint32_t* index = Upload(std::vector<uint32_t>{0, 1});
  Stream* s = stream_.get();
  auto expect_invalid = [](const Status& status, const char* what) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << what << ": " << status;
  };
  expect_invalid(device_->Gather(nullptr, f, index, 2, 1, s), "Gather dst");
  expect_invalid(device_->Gather(f, nullptr, index, 2, 1, s), "Gather src");
  expect_invalid(device_->Gather(f, f, nullptr, 2, 1, s), "Gather index");
  expect_invalid(device_->Gather(f, f, index, 2, 1, nullptr), "Gather stream");
  expect_invalid(device_->ScatterAdd(f, nullptr, index, 2, 1, s), "ScatterAdd");
  expect_invalid(device_->Scatter(nullptr, f, index, 2, 1, s), "Scatter");
  expect_invalid(device_->Add(f, nullptr, 4, s), "Add");
  expect_invalid(device_->Fill(nullptr, 1.0f, 4, s), "Fill");
  expect_invalid(device_->Copy(nullptr, f, 4, CopyKind::kDeviceToDevice, s), "Copy");
  expect_invalid(device_->Copy(f, f, 4, CopyKind::kDeviceToDevice, nullptr), "Copy stream");
  expect_invalid(device_->Record(nullptr, s), "Record event");
  expect_invalid(device_->StreamWait(s, nullptr), "StreamWait event");
  expect_invalid(device_->Synchronize(nullptr), "Synchronize");
  // Nothing was enqueued, and the stream still works.
  ASSERT_OK(device_->Synchronize(s));
  ASSERT_OK(device_->Fill(f, 4.0f, 16, s));
  ExpectFloatsEq(Download(f, 16), std::vector<float>(16, 4.0f));
}

TEST_P(DeviceTest, ManyThreadsEnqueueConcurrently) {
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 200;
  constexpr size_t kCount = 257;
  float* ones = Alloc<float>(kCount);
  ASSERT_OK(device_->Fill(ones, 1.0f, kCount, stream_.get()));
  ASSERT_OK(device_->Synchronize(stream_.get()));
  std::vector<float*> sums(kThreads);
  for (float*& sum : sums) sum = Alloc<float>(kCount);
  for (float* sum : sums) {
    ASSERT_OK(device_->Fill(sum, 0.0f, kCount, stream_.get()));
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto check = [&](const Status& s) {
        if (!s.ok()) ++failures;
      };
      // Even threads share stream_; odd ones also allocate, free and order
      // their own stream behind stream_ with an event.
      std::unique_ptr<Stream> own;
      std::unique_ptr<Event> event;
      if (t % 2 == 1) {
        own = std::move(device_->CreateStream()).value();
        event = std::move(device_->CreateEvent()).value();
      }
      for (int i = 0; i < kAddsPerThread; ++i) {
        check(device_->Add(sums[t], ones, kCount, stream_.get()));
        if (own != nullptr && i % 20 == 0) {
          check(device_->Record(event.get(), stream_.get()));
          check(device_->StreamWait(own.get(), event.get()));
          StatusOr<void*> scratch = device_->Allocate(kCount * sizeof(float));
          check(scratch.status());
          if (!scratch.ok()) continue;
          float* f = static_cast<float*>(*scratch);
          check(device_->Copy(f, sums[t], kCount * sizeof(float), CopyKind::kDeviceToDevice,
                              own.get()));
          check(device_->Synchronize(own.get()));
          device_->Free(f);
        }
        if (i % 50 == 0) check(device_->Synchronize(stream_.get()));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    ExpectFloatsEq(Download(sums[t], kCount), std::vector<float>(kCount, kAddsPerThread));
  }
}

TEST_P(DeviceTest, DestroyingAStreamDrainsQueuedWork) {
  const size_t slow_count = SlowCount();
  float* x = Alloc<float>(slow_count);
  float* ones = Alloc<float>(slow_count);
  std::vector<float> result(slow_count, -1.0f);
  {
    std::unique_ptr<Stream> doomed = NewStream();
    ASSERT_OK(device_->Fill(ones, 1.0f, slow_count, doomed.get()));
    ASSERT_OK(device_->Fill(x, 0.0f, slow_count, doomed.get()));
    EnqueueSlowChain(x, ones, slow_count, kSlowAdds, doomed.get());
    ASSERT_OK(device_->Copy(result.data(), x, slow_count * sizeof(float), CopyKind::kDeviceToHost,
                            doomed.get()));
  }  // no Synchronize: the destructor must run everything queued
  ExpectFloatsEq(result, std::vector<float>(slow_count, kSlowAdds));
}

// Odd widths and pointers that are float-aligned but not 16-byte aligned
// (the CUDA kernels' scalar path), next to widths the vector path takes.
TEST_P(DeviceTest, OddWidthsAndUnalignedPointers) {
  for (size_t width : {1, 3, 5, 7, 13, 4, 8}) {
    for (size_t offset : {0, 1, 2, 3}) {  // floats past a 256-byte boundary
      SCOPED_TRACE("width " + std::to_string(width) + " offset " + std::to_string(offset));
      constexpr size_t kN = 37;
      const size_t rows = 2 * kN + 3;
      const std::vector<float> table = RandomFloats(rows * width, 20);
      const std::vector<float> updates = RandomFloats(kN * width, 21);
      const std::vector<uint32_t> index = DistinctIndexes(kN, rows, 22);
      // Each array sits `offset` floats into a larger allocation.
      std::vector<float> padded_table(offset, 0.0f);
      padded_table.insert(padded_table.end(), table.begin(), table.end());
      std::vector<float> padded_updates(offset, 0.0f);
      padded_updates.insert(padded_updates.end(), updates.begin(), updates.end());
      float* src = Upload(padded_table) + offset;
      float* delta = Upload(padded_updates) + offset;
      uint32_t* d_index = Upload(index);
      float* out = Alloc<float>(kN * width + offset) + offset;

      std::vector<float> gathered(kN * width);
      for (size_t i = 0; i < kN; ++i) {
        std::copy_n(table.begin() + index[i] * width, width, gathered.begin() + i * width);
      }
      ASSERT_OK(device_->Gather(out, src, d_index, kN, width, stream_.get()));
      ExpectFloatsEq(Download(out, kN * width), gathered);

      std::vector<float> added = table;
      for (size_t i = 0; i < kN; ++i) {
        for (size_t j = 0; j < width; ++j) {
          added[index[i] * width + j] += updates[i * width + j];
        }
      }
      ASSERT_OK(device_->ScatterAdd(src, delta, d_index, kN, width, stream_.get()));
      ExpectFloatsEq(Download(src, rows * width), added);
      // The floats before the arrays were not touched.
      if (offset > 0) {
        ExpectFloatsEq(Download(src - offset, offset), std::vector<float>(offset, 0.0f));
      }
    }
  }
}

// Add's aliasing contract (device.h): dst == src doubles every element, on
// the vector path (16-byte aligned) and the scalar one; disjoint ranges of
// one allocation, even adjacent, are fine; a partial overlap is rejected at
// once.
TEST_P(DeviceTest, AddAliasingContract) {
  for (size_t offset : {0, 1}) {  // 0: float4 path; 1: scalar path
    for (size_t count : {1, 4, 7, 1027}) {
      SCOPED_TRACE("offset " + std::to_string(offset) + " count " + std::to_string(count));
      const std::vector<float> values = RandomFloats(offset + 2 * count, 50);
      float* base = Upload(values);
      float* a = base + offset;
      ASSERT_OK(device_->Add(a, a, count, stream_.get()));  // doubling
      std::vector<float> expected = values;
      for (size_t i = 0; i < count; ++i) expected[offset + i] *= 2.0f;
      ExpectFloatsEq(Download(base, values.size()), expected);
      // Adjacent halves of one allocation: a += b, then b += a.
      float* b = a + count;
      ASSERT_OK(device_->Add(a, b, count, stream_.get()));
      ASSERT_OK(device_->Add(b, a, count, stream_.get()));
      for (size_t i = 0; i < count; ++i) {
        expected[offset + i] += expected[offset + count + i];
        expected[offset + count + i] += expected[offset + i];
      }
      ExpectFloatsEq(Download(base, values.size()), expected);
      if (count > 1) {  // one float of overlap, either way round
        for (const auto& [dst, src] :
             {std::pair<float*, float*>{a, a + count - 1}, {a + count - 1, a}, {a + 1, a}}) {
          const Status overlap = device_->Add(dst, src, count, stream_.get());
          EXPECT_EQ(overlap.code(), StatusCode::kInvalidArgument) << overlap;
        }
      }
      // Nothing ran for the rejected calls.
      ExpectFloatsEq(Download(base, values.size()), expected);
    }
  }
}

// Add and Fill on pointers off the 16-byte grid, with lengths around 4.
TEST_P(DeviceTest, AddAndFillUnaligned) {
  for (size_t offset : {1, 3}) {
    for (size_t count : {1, 5, 6, 7, 1027}) {
      SCOPED_TRACE("offset " + std::to_string(offset) + " count " + std::to_string(count));
      std::vector<float> base = RandomFloats(count + offset + 1, 30);
      const std::vector<float> addend = RandomFloats(count + offset, 31);
      float* dst = Upload(base);
      float* src = Upload(addend);
      std::vector<float> expected = base;
      for (size_t i = 0; i < count; ++i) {
        expected[offset + i] += addend[offset + i];
      }
      ASSERT_OK(device_->Add(dst + offset, src + offset, count, stream_.get()));
      ExpectFloatsEq(Download(dst, count + offset + 1), expected);
      for (size_t i = 0; i < count; ++i) expected[offset + i] = 0.5f;
      ASSERT_OK(device_->Fill(dst + offset, 0.5f, count, stream_.get()));
      ExpectFloatsEq(Download(dst, count + offset + 1), expected);
    }
  }
}

std::string KindName(const ::testing::TestParamInfo<DeviceKind>& info) {
  switch (info.param) {
    case DeviceKind::kHost:
      return "Host";
    case DeviceKind::kCuda:
      return "Cuda";
    case DeviceKind::kAuto:
      return "Auto";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(Host, DeviceTest, ::testing::Values(DeviceKind::kHost), KindName);
INSTANTIATE_TEST_SUITE_P(Cuda, DeviceTest, ::testing::Values(DeviceKind::kCuda), KindName);

// ---- What only the host backend promises -----------------------------------

class HostDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Device>> device = CreateDevice(DeviceKind::kHost, DeviceOptions());
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(device).value();
    stream_ = std::move(device_->CreateStream()).value();
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
};

TEST(CreateDeviceTest, HostAlwaysWorks) {
  StatusOr<std::unique_ptr<Device>> host = CreateDevice(DeviceKind::kHost, DeviceOptions());
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ((*host)->kind(), DeviceKind::kHost);
  EXPECT_TRUE(CheckDeviceAvailable(DeviceKind::kHost).ok());
  EXPECT_TRUE(CheckDeviceAvailable(DeviceKind::kAuto).ok());
  StatusOr<std::unique_ptr<Stream>> stream = (*host)->CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ((*stream)->native_handle(), nullptr);
}

// kAuto is CUDA exactly when kCuda works; kCuda's error names the reason.
TEST(CreateDeviceTest, AutoAndForcedCudaAgree) {
  const Status cuda_available = CheckDeviceAvailable(DeviceKind::kCuda);
  StatusOr<std::unique_ptr<Device>> automatic = CreateDevice(DeviceKind::kAuto, DeviceOptions());
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  StatusOr<std::unique_ptr<Device>> cuda = CreateDevice(DeviceKind::kCuda, DeviceOptions());
  if (cuda_available.ok()) {
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    EXPECT_EQ((*cuda)->kind(), DeviceKind::kCuda);
    EXPECT_EQ((*automatic)->kind(), DeviceKind::kCuda);
    return;
  }
  EXPECT_EQ((*automatic)->kind(), DeviceKind::kHost);
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(cuda.status().message(), cuda_available.message());
  const std::string& why = cuda.status().message();
  // Built without CUDA: "CUDA backend not built: ...". Built with it but no
  // GPU (this CI machine): "no CUDA device: cudaGetDeviceCount failed: ...".
  EXPECT_TRUE(why.rfind("CUDA backend not built", 0) == 0 ||
              why.rfind("no CUDA device: cudaGetDeviceCount", 0) == 0)
      << why;
  std::cout << "kCuda here: " << cuda.status() << "\n";
}

TEST_F(HostDeviceTest, BlocksAreAlignedAndZeroBytesIsABlock) {
  for (size_t bytes : {0, 1, 63, 64, 65, 1000}) {
    StatusOr<void*> p = device_->Allocate(bytes);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_NE(*p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 64, 0u) << bytes;
    StatusOr<void*> pinned = device_->AllocatePinned(bytes);
    ASSERT_TRUE(pinned.ok()) << pinned.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*pinned) % 64, 0u) << bytes;
    device_->Free(*p);
    device_->FreePinned(*pinned);
  }
  EXPECT_EQ(device_->bytes_in_use(), 0u);
}

// Large blocks start on a page, as cudaMalloc's and cudaHostAlloc's do: the
// C library's aligned_alloc(64) puts an mmap'd block 64 bytes into a page,
// where the kernel's copy of an update lent from it ran 2.5x slower on one
// machine (docs/performance.md, "Where the 16 MiB gap goes").
TEST_F(HostDeviceTest, LargeBlocksStartOnAPage) {
  const size_t from = host::HostDevice::kPageAlignedFrom;
  for (size_t bytes : {from, from + 1, size_t{1} << 20, (size_t{16} << 20) + 64}) {
    StatusOr<void*> p = device_->Allocate(bytes);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(device_->HostAlias(*p)) % host::HostDevice::kPageBytes,
              0u)
        << bytes;
    StatusOr<void*> pinned = device_->AllocatePinned(bytes);
    ASSERT_TRUE(pinned.ok()) << pinned.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*pinned) % host::HostDevice::kPageBytes, 0u) << bytes;
    // The whole block is usable (the rounding did not shorten it).
    static_cast<char*>(*pinned)[bytes - 1] = 1;
    device_->Free(*p);
    device_->FreePinned(*pinned);
  }
  EXPECT_EQ(device_->bytes_in_use(), 0u);
}

// A copy on an idle stream runs at once in the caller (no task made of
// it); behind other work it waits its turn like any enqueued operation.
TEST_F(HostDeviceTest, ACopyRunsAtOnceOnlyOnAnIdleStream) {
  constexpr size_t kFloats = 1024;
  StatusOr<void*> d = device_->Allocate(kFloats * sizeof(float));
  ASSERT_TRUE(d.ok()) << d.status();
  const auto* alias = static_cast<const float*>(device_->HostAlias(*d));
  ASSERT_NE(alias, nullptr);
  std::vector<float> ones(kFloats, 1.0f), twos(kFloats, 2.0f);
  ASSERT_OK(device_->Copy(*d, ones.data(), kFloats * sizeof(float), CopyKind::kHostToDevice,
                          stream_.get()));
  EXPECT_EQ(alias[kFloats - 1], 1.0f);  // done on return, before any Synchronize
  std::atomic<bool> go{false};
  ASSERT_OK(device_->HostFunction(
      [&go] {
        while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      stream_.get()));
  ASSERT_OK(device_->Copy(*d, twos.data(), kFloats * sizeof(float), CopyKind::kHostToDevice,
                          stream_.get()));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(alias[0], 1.0f) << "the copy ran before the work queued ahead of it";
  go.store(true);
  ASSERT_OK(device_->Synchronize(stream_.get()));
  EXPECT_EQ(alias[0], 2.0f);
  EXPECT_EQ(alias[kFloats - 1], 2.0f);
  device_->Free(*d);
}

TEST_F(HostDeviceTest, FreeOfUnknownPointerIsIgnored) {
  int on_stack = 0;
  StatusOr<void*> p = device_->Allocate(128);
  ASSERT_TRUE(p.ok()) << p.status();
  device_->Free(&on_stack);
  device_->FreePinned(&on_stack);
  device_->FreePinned(*p);  // a device block is not pinned memory
  EXPECT_EQ(device_->bytes_in_use(), 128u);
  device_->Free(*p);
  device_->Free(*p);  // double free
  EXPECT_EQ(device_->bytes_in_use(), 0u);
}

TEST_F(HostDeviceTest, HostPointersAreNotDeviceMemory) {
  std::vector<float> host(16);
  float* block = static_cast<float*>(*device_->Allocate(16 * sizeof(float)));
  Stream* s = stream_.get();
  EXPECT_EQ(device_->Fill(host.data(), 1.0f, 16, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->Fill(block, 1.0f, 17, s).code(),  // one float too many
            StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->Copy(host.data(), block, 64, CopyKind::kHostToDevice, s).code(),
            StatusCode::kInvalidArgument);
  Status s_ok = device_->Copy(host.data(), block, 64, CopyKind::kDeviceToHost, s);
  EXPECT_TRUE(s_ok.ok()) << s_ok;
  EXPECT_TRUE(device_->Synchronize(s).ok());
  device_->Free(block);
}

TEST_F(HostDeviceTest, SynchronizeReportsAnOutOfRangeIndexOnce) {
  float* table = static_cast<float*>(*device_->Allocate(sizeof(float) * 40));
  float* rows = static_cast<float*>(*device_->Allocate(sizeof(float) * 8));
  uint32_t* index = static_cast<uint32_t*>(*device_->Allocate(2 * sizeof(uint32_t)));
  const std::vector<uint32_t> bad = {3, 10};  // row 10 of a 10-row table
  Stream* s = stream_.get();
  ASSERT_OK(device_->Copy(index, bad.data(), 8, CopyKind::kHostToDevice, s));
  ASSERT_OK(device_->Fill(table, 1.0f, 40, s));
  ASSERT_OK(device_->Fill(rows, 7.0f, 8, s));
  // Accepted when enqueued (the index is only read when it runs) ...
  ASSERT_OK(device_->Gather(rows, table, index, 2, 4, s));
  ASSERT_OK(device_->ScatterAdd(table, rows, index, 2, 4, s));
  ASSERT_OK(device_->Fill(rows, 2.0f, 8, s));  // later work still runs
  std::vector<float> back(8);
  ASSERT_OK(device_->Copy(back.data(), rows, 32, CopyKind::kDeviceToHost, s));
  // ... and reported by the next Synchronize: the first error only.
  Status status = device_->Synchronize(s);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << status;
  EXPECT_NE(status.message().find("Gather"), std::string::npos) << status;
  EXPECT_NE(status.message().find("10"), std::string::npos) << status;
  EXPECT_EQ(back, std::vector<float>(8, 2.0f));
  ASSERT_OK(device_->Synchronize(s));  // reported once
  // The failed ScatterAdd did nothing.
  std::vector<float> table_back(40);
  ASSERT_OK(device_->Copy(table_back.data(), table, 160, CopyKind::kDeviceToHost, s));
  ASSERT_OK(device_->Synchronize(s));
  EXPECT_EQ(table_back, std::vector<float>(40, 1.0f));
  device_->Free(table);
  device_->Free(rows);
  device_->Free(index);
}

// By default an operation on an idle stream runs inside the call (no thread
// hand-off): the event recorded after it is complete at once.
TEST_F(HostDeviceTest, IdleStreamRunsOperationsInsideTheCall) {
  float* x = static_cast<float*>(std::move(device_->Allocate(64)).value());
  std::unique_ptr<Event> event = std::move(device_->CreateEvent()).value();
  ASSERT_OK(device_->Fill(x, 2.0f, 16, stream_.get()));
  ASSERT_OK(device_->Record(event.get(), stream_.get()));
  EXPECT_TRUE(device_->EventDone(event.get()));
  ASSERT_OK(device_->Synchronize(stream_.get()));
  device_->Free(x);
}

// What is queued behind a wait is not run by the caller: it keeps its place
// after the wait, and a host function never runs inside the call.
TEST_F(HostDeviceTest, OperationsBehindAWaitOrAHostFunctionKeepTheirOrder) {
  std::unique_ptr<Stream> other = std::move(device_->CreateStream()).value();
  std::unique_ptr<Event> gate = std::move(device_->CreateEvent()).value();
  std::unique_ptr<Event> after = std::move(device_->CreateEvent()).value();
  float* x = static_cast<float*>(std::move(device_->Allocate(64)).value());
  std::atomic<bool> open{false};
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  // `other` is held by a host function until `open`; the gate follows it.
  ASSERT_OK(device_->HostFunction(
      [&] {
        ran_on = std::this_thread::get_id();
        while (!open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      other.get()));
  ASSERT_OK(device_->Record(gate.get(), other.get()));
  ASSERT_OK(device_->StreamWait(stream_.get(), gate.get()));
  ASSERT_OK(device_->Fill(x, 5.0f, 16, stream_.get()));
  ASSERT_OK(device_->Record(after.get(), stream_.get()));
  EXPECT_FALSE(device_->EventDone(after.get())) << "the fill ran before the wait ended";
  open.store(true);
  ASSERT_OK(device_->Synchronize(stream_.get()));
  EXPECT_TRUE(device_->EventDone(after.get()));
  EXPECT_NE(ran_on, caller);
  std::vector<float> back(16);
  ASSERT_OK(device_->Copy(back.data(), x, 64, CopyKind::kDeviceToHost, stream_.get()));
  ASSERT_OK(device_->Synchronize(stream_.get()));
  EXPECT_EQ(back, std::vector<float>(16, 5.0f));
  ASSERT_OK(device_->Synchronize(other.get()));
  device_->Free(x);
}

TEST_F(HostDeviceTest, StreamsAndEventsMayOutliveTheDevice) {
  std::unique_ptr<Event> event = std::move(device_->CreateEvent()).value();
  ASSERT_OK(device_->Record(event.get(), stream_.get()));
  ASSERT_OK(device_->Synchronize(stream_.get()));
  device_.reset();
  stream_.reset();
  event.reset();
}

}  // namespace
}  // namespace geeps::device
