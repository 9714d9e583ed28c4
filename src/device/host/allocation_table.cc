#include "device/host/allocation_table.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "device/host/host_device.h"

namespace geeps::device::host {
namespace {

std::string Describe(const char* op, const char* arg, const void* p, size_t bytes) {
  std::ostringstream os;
  os << op << ": " << arg << " " << p << " (" << bytes << " bytes)";
  return os.str();
}

// Every live AllocationTable of the process. Lock order: registry, then a
// table's mu_.
struct Registry {
  common::Mutex mu;
  std::vector<const AllocationTable*> tables GEEPS_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static Registry* const kRegistry = new Registry;  // never destroyed
  return *kRegistry;
}

}  // namespace

AllocationTable::AllocationTable(uint64_t budget, uintptr_t offset, int ordinal)
    : budget_(budget), offset_(offset), ordinal_(ordinal) {
  Registry& registry = TheRegistry();
  common::MutexLock lock(&registry.mu);
  registry.tables.push_back(this);
}

AllocationTable::~AllocationTable() {
  {
    Registry& registry = TheRegistry();
    common::MutexLock lock(&registry.mu);
    auto it = std::find(registry.tables.begin(), registry.tables.end(), this);
    if (it != registry.tables.end()) registry.tables.erase(it);
  }
  FreeAll();
}

std::optional<int> AllocationTable::OtherDeviceHolding(const void* p) const {
  Registry& registry = TheRegistry();
  common::MutexLock lock(&registry.mu);
  for (const AllocationTable* table : registry.tables) {
    if (table == this || table->ordinal_ == ordinal_) continue;
    // Strictly inside: p just past a block of theirs is not their memory.
    if (table->Available(p).value_or(0) > 0) return table->ordinal_;
  }
  return std::nullopt;
}

StatusOr<void*> AllocationTable::Allocate(size_t bytes) {
  common::MutexLock lock(&mu_);
  if (budget_ != 0 && (bytes > budget_ || in_use_ > budget_ - bytes)) {
    std::ostringstream os;
    os << "host device: Allocate(" << bytes
       << " bytes) exceeds the device memory budget: requested " << bytes << " bytes, in use "
       << in_use_ << " bytes, budget " << budget_ << " bytes";
    return ResourceExhaustedError(os.str());
  }
  GEEPS_ASSIGN_OR_RETURN(void* p, AlignedAlloc(bytes));
  void* device_address = ToDevice(p);
  try {
    device_.emplace(static_cast<const char*>(device_address), bytes);
  } catch (const std::bad_alloc&) {
    std::free(p);
    return ResourceExhaustedError("host device: out of host memory");
  }
  in_use_ += bytes;
  return device_address;
}

bool AllocationTable::Free(void* p) {
  common::MutexLock lock(&mu_);
  auto it = device_.find(static_cast<const char*>(p));
  if (it == device_.end() || mapped_.count(it->first) != 0) return false;
  in_use_ -= it->second;
  device_.erase(it);
  std::free(ToHost(p));
  return true;
}

void* AllocationTable::Map(void* p, size_t bytes) {
  if (bytes == 0) return nullptr;
  const char* address = static_cast<const char*>(ToDevice(p));
  common::MutexLock lock(&mu_);
  // Overlap with a live block: the first block at or past `address` starts
  // inside the range, or the one before it ends past `address`.
  auto next = device_.lower_bound(address);
  if (next != device_.end() && std::less<>()(next->first, address + bytes)) return nullptr;
  if (next != device_.begin()) {
    auto prev = std::prev(next);
    if (std::greater<>()(prev->first + prev->second, address)) return nullptr;
  }
  try {
    mapped_.insert(address);
    device_.emplace(address, bytes);
  } catch (const std::bad_alloc&) {
    mapped_.erase(address);
    return nullptr;
  }
  return const_cast<char*>(address);
}

bool AllocationTable::Unmap(void* p) {
  common::MutexLock lock(&mu_);
  const char* address = static_cast<const char*>(p);
  if (mapped_.erase(address) == 0) return false;
  device_.erase(address);
  return true;
}

StatusOr<void*> AllocationTable::AllocatePinned(size_t bytes) {
  common::MutexLock lock(&mu_);
  GEEPS_ASSIGN_OR_RETURN(void* p, AlignedAlloc(bytes));
  try {
    pinned_.insert(p);
  } catch (const std::bad_alloc&) {
    std::free(p);
    return ResourceExhaustedError("host device: out of host memory");
  }
  return p;
}

bool AllocationTable::FreePinned(void* p) {
  common::MutexLock lock(&mu_);
  if (pinned_.erase(p) == 0) return false;
  std::free(p);
  return true;
}

void AllocationTable::FreeAll() {
  common::MutexLock lock(&mu_);
  for (const auto& [block, bytes] : device_) {
    if (mapped_.count(block) == 0) std::free(ToHost(const_cast<char*>(block)));
  }
  mapped_.clear();
  for (void* p : pinned_) std::free(p);
  device_.clear();
  pinned_.clear();
  in_use_ = 0;
}

uint64_t AllocationTable::in_use() const {
  common::MutexLock lock(&mu_);
  return in_use_;
}

std::optional<size_t> AllocationTable::Available(const void* p) const {
  const char* address = static_cast<const char*>(p);
  common::MutexLock lock(&mu_);
  auto it = device_.upper_bound(address);
  if (it == device_.begin()) return std::nullopt;
  --it;
  const char* end = it->first + it->second;
  if (std::greater<>()(address, end)) return std::nullopt;
  return static_cast<size_t>(end - address);
}

Status AllocationTable::CheckRange(const char* op, const char* arg, const void* p, size_t bytes,
                                   bool running) const {
  std::optional<size_t> available = Available(p);
  if (available && *available >= bytes) return Status::OK();
  // Not (wholly) in a block of its own, maybe in another device's: p just
  // past a block of its own may be the start of another device's block.
  if (std::optional<int> other = OtherDeviceHolding(p)) {
    return InternalError(Describe(op, arg, p, bytes) +
                         " is memory of host device host:" + std::to_string(*other) +
                         ", but the operation runs on host:" + std::to_string(ordinal_) +
                         " (a worker used another device's buffer)");
  }
  if (running) {
    return DeviceError(Describe(op, arg, p, bytes) +
                       " is no longer inside a live device allocation "
                       "(freed while the operation was queued?)");
  }
  return InvalidArgumentError(Describe(op, arg, p, bytes) +
                              " is not inside a live device allocation of "
                              "this device");
}

StatusOr<void*> AllocationTable::AlignedAlloc(size_t bytes) {
  const size_t align =
      bytes >= HostDevice::kPageAlignedFrom ? HostDevice::kPageBytes : HostDevice::kAlignment;
  if (bytes > SIZE_MAX - align) {
    return ResourceExhaustedError("host device: cannot allocate " + std::to_string(bytes) +
                                  " bytes");
  }
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) & ~(align - 1);
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) {
    return ResourceExhaustedError(
        "host device: out of host memory "
        "allocating " +
        std::to_string(bytes) + " bytes");
  }
  return p;
}

}  // namespace geeps::device::host
