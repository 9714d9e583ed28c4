#include "client/memory_manager.h"

#include <algorithm>

namespace geeps::client {
namespace {

memory::Level LevelOf(MemoryGuarantee g) {
  switch (g) {
    case MemoryGuarantee::kNone:
      return memory::Level::kNone;
    case MemoryGuarantee::kDoubleBuffering:
      return memory::Level::kDoubleBuffering;
    case MemoryGuarantee::kAllLocalOnDevice:
      return memory::Level::kAllLocalOnDevice;
    case MemoryGuarantee::kWholeCacheOnDevice:
      return memory::Level::kWholeCacheOnDevice;
  }
  return memory::Level::kDoubleBuffering;
}

}  // namespace

MemoryManager::MemoryManager(device::Device* device, memory::Plan plan)
    : device_(device), plan_(std::move(plan)), plan_json_(plan_.ToJson()) {}

MemoryManager::~MemoryManager() {
  if (pool_) pool_->Cancel();
  pool_.reset();
  if (region_) device_->Free(region_);
}

StatusOr<std::unique_ptr<MemoryManager>> MemoryManager::Create(
    const Config& config, int rank, const OpSequence& seq,
    const std::vector<std::unique_ptr<TableCache>>& tables, uint64_t fixed_bytes,
    device::Device* device) {
  const uint64_t budget = config.device_memory_budget;
  const std::string who = "FinishVirtualIteration: worker " + std::to_string(rank) + ": ";
  // The pool's region is aligned by hand: keep room for that.
  const uint64_t slack = memory::kDefaultAlignment;
  if (budget <= fixed_bytes + slack) {
    return ResourceExhaustedError(
        who + "the device memory budget of " + std::to_string(budget) +
        " bytes does not even hold the gather/scatter indexes and the buffers of scattered "
        "local accesses (" +
        std::to_string(fixed_bytes) +
        " bytes, which stay in device memory); raise Config::device_memory_budget");
  }
  memory::PlanInput in;
  in.budget_bytes = budget - fixed_bytes - slack;
  in.required_level = LevelOf(config.memory_guarantee);
  // Shared tables are numbered among themselves for the planner.
  std::vector<int> shared_index(config.tables.size(), -1);
  for (TableId t = 0; t < config.tables.size(); ++t) {
    if (config.tables[t].local) continue;
    shared_index[t] = static_cast<int>(in.tables.size());
    in.tables.push_back({tables[t]->rows.size(), config.tables[t].row_width * sizeof(float)});
  }
  std::vector<int> batch_of(config.tables.size(), -1);
  for (const RecordedAccess& a : seq.locals()) {
    if (batch_of[a.table] >= 0) continue;
    batch_of[a.table] = static_cast<int>(in.local_batches.size());
    const TableSpec& spec = config.tables[a.table];
    in.local_batches.push_back({spec.num_rows * spec.row_width * sizeof(float)});
  }
  // Accesses: reads, then updates, then local accesses, by handle.
  auto add = [&](memory::AccessKind kind, const RecordedAccess& a, int table) {
    memory::AccessInfo info;
    info.kind = kind;
    info.table = table;
    info.bytes = a.rows.size() * config.tables[a.table].row_width * sizeof(float);
    if (kind != memory::AccessKind::kLocal) {
      const std::vector<uint64_t>& cached = tables[a.table]->rows;
      info.cache_rows.reserve(a.rows.size());
      for (RowIndex r : a.rows)
        info.cache_rows.push_back(static_cast<uint64_t>(
            std::lower_bound(cached.begin(), cached.end(), r) - cached.begin()));
    }
    in.accesses.push_back(std::move(info));
  };
  for (const RecordedAccess& a : seq.reads())
    add(memory::AccessKind::kRead, a, shared_index[a.table]);
  for (const RecordedAccess& a : seq.updates())
    add(memory::AccessKind::kUpdate, a, shared_index[a.table]);
  for (const RecordedAccess& a : seq.locals())
    add(memory::AccessKind::kLocal, a, batch_of[a.table]);
  const int reads = static_cast<int>(seq.reads().size());
  const int updates = static_cast<int>(seq.updates().size());
  // The prologue runs first, then the iteration.
  for (Section section : {kPrologue, kRepeated}) {
    for (const Op& op : seq.ops(section)) {
      switch (op.type) {
        case OpType::kRead:
          in.ops.push_back({memory::OpKind::kOpen, op.handle});
          break;
        case OpType::kPostRead:
          in.ops.push_back({memory::OpKind::kClose, op.handle});
          break;
        case OpType::kPreUpdate:
          in.ops.push_back({memory::OpKind::kOpen, reads + op.handle});
          break;
        case OpType::kUpdate:
          in.ops.push_back({memory::OpKind::kClose, reads + op.handle});
          break;
        case OpType::kLocalAccess:
          in.ops.push_back({memory::OpKind::kOpen, reads + updates + op.handle});
          break;
        case OpType::kPostLocalAccess:
          in.ops.push_back({memory::OpKind::kClose, reads + updates + op.handle});
          break;
        case OpType::kClock:
          break;
      }
    }
  }
  StatusOr<memory::Plan> plan = memory::MakePlan(in);
  if (!plan.ok()) {
    return Status(plan.status().code(),
                  who + plan.status().message() + " (besides " + std::to_string(fixed_bytes) +
                      " bytes of parameter cache, oplogs and indexes kept in device memory)");
  }
  std::unique_ptr<MemoryManager> mm(new MemoryManager(device, std::move(plan).value()));
  mm->first_id_[1] = reads;
  mm->first_id_[2] = reads + updates;
  mm->num_accesses_ = reads + updates + static_cast<int>(seq.locals().size());
  mm->stall_by_access_.reset(new std::atomic<int64_t>[mm->num_accesses_]);
  for (int i = 0; i < mm->num_accesses_; ++i) mm->stall_by_access_[i].store(0);
  mm->shared_index_ = std::move(shared_index);
  mm->local_on_device_.assign(config.tables.size(), true);
  for (TableId t = 0; t < config.tables.size(); ++t) {
    if (batch_of[t] >= 0) mm->local_on_device_[t] = mm->plan_.local_on_device[batch_of[t]];
  }
  const uint64_t pool_bytes = std::max<uint64_t>(mm->plan_.pool_bytes, memory::kDefaultAlignment);
  GEEPS_ASSIGN_OR_RETURN(mm->region_, device->Allocate(pool_bytes + slack));
  const uintptr_t base = (reinterpret_cast<uintptr_t>(mm->region_) + slack - 1) & ~(slack - 1);
  mm->pool_ = std::make_unique<memory::BufferPool>(reinterpret_cast<void*>(base), pool_bytes);
  return mm;
}

void MemoryManager::AddStall(const AccessRef& who, std::chrono::nanoseconds t) {
  stall_ns_.fetch_add(t.count());
  const int id = first_id_[static_cast<int>(who.kind)] + who.handle;
  if (id >= 0 && id < num_accesses_) stall_by_access_[id].fetch_add(t.count());
}

StatusOr<float*> MemoryManager::Acquire(uint64_t bytes, std::chrono::milliseconds timeout,
                                        const AccessRef* who) {
  if (auto off = pool_->TryAllocate(std::max<uint64_t>(bytes, 1)))
    return static_cast<float*>(pool_->Address(*off));
  const auto start = std::chrono::steady_clock::now();
  StatusOr<uint64_t> off = pool_->AllocateWait(std::max<uint64_t>(bytes, 1), start + timeout);
  if (who) AddStall(*who, std::chrono::steady_clock::now() - start);
  if (!off.ok()) return off.status();
  return static_cast<float*>(pool_->Address(*off));
}

float* MemoryManager::TryAcquireLeaving(uint64_t bytes, uint64_t reserve) {
  const uint64_t in_use = pool_->bytes_in_use();
  if (in_use + bytes + reserve > pool_->size()) return nullptr;
  auto off = pool_->TryAllocate(std::max<uint64_t>(bytes, 1));
  if (!off) return nullptr;
  // Bytes are not enough: the application's buffers need one free block of
  // that size, or a prefetch could fragment the pool into a deadlock.
  if (pool_->largest_free_block() < reserve) {
    pool_->Free(*off).ok();
    return nullptr;
  }
  return static_cast<float*>(pool_->Address(*off));
}

void MemoryManager::Release(const float* buffer) {
  const uint64_t off = static_cast<uint64_t>(reinterpret_cast<const char*>(buffer) -
                                             static_cast<const char*>(pool_->base()));
  pool_->Free(off).ok();
}

void MemoryManager::FillStats(WorkerStats* s) const {
  s->memory_stall_seconds = static_cast<double>(stall_ns_.load()) * 1e-9;
  s->bytes_host_to_device = h2d_bytes_.load();
  s->bytes_device_to_host = d2h_bytes_.load();
  s->pool_bytes = pool_ ? pool_->size() : 0;
  s->pool_high_water = pool_ ? pool_->high_water_mark() : 0;
  s->memory_plan_json = plan_json_;
  static const char* const kNames[3] = {"read", "update", "local"};
  std::string json = "{";
  for (int kind = 0; kind < 3; ++kind) {
    const int end = kind < 2 ? first_id_[kind + 1] : num_accesses_;
    for (int id = first_id_[kind]; id < end; ++id) {
      const int64_t ns = stall_by_access_[id].load();
      if (ns == 0) continue;
      if (json.size() > 1) json += ",";
      json += "\"" + std::string(kNames[kind]) + "#" + std::to_string(id - first_id_[kind]) +
              "\":" + std::to_string(static_cast<double>(ns) * 1e-9);
    }
  }
  s->memory_stall_by_access_json = json + "}";
}

}  // namespace geeps::client
