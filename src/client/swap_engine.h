// Background swapping of local data that lives in host memory (the memory
// manager's alloc and reclaim threads).
//
// The alloc thread walks the recorded sequence (the prologue once, then the
// iteration forever) ahead of the application: for the next local access to
// a table in host memory it takes a pool buffer and, if the access fetches,
// copies the rows in on its own stream, so that the copy overlaps the
// application's work. It never runs more than `depth` such accesses ahead,
// and never copies rows in before every earlier write-back of the same table
// has finished. The reclaim thread writes kept buffers back (on its own
// stream) after PostLocalAccess and returns them to the pool.
//
// Stream order with the application: a buffer handed back by the
// application (Close, or any pool buffer through NoteRelease) may still be in
// use by the application's work enqueued on its compute stream. Close records
// the access's own event on that stream and the reclaim thread's stream waits
// for it before copying the buffer out; NoteRelease records one shared event
// that the alloc thread's stream waits for before it copies into any buffer
// it took from the pool (conservative: it waits for all compute enqueued up
// to the latest release). So no copy here reads a buffer before the
// application's kernels have written it, nor overwrites one they still read.
//
// Threads: Open/Close/NoteRelease/Drain from the application thread; Stop
// from any.
#ifndef GEEPS_CLIENT_SWAP_ENGINE_H_
#define GEEPS_CLIENT_SWAP_ENGINE_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "client/memory_manager.h"
#include "common/mutex.h"
#include "device/device.h"
#include "geeps/config.h"
#include "geeps/status.h"

namespace geeps::client {

class SwapEngine {
 public:
  // One local access (by handle) to a table in host memory.
  struct Access {
    bool swapped = false;  // false: not managed here (device-resident)
    TableId table = 0;
    uint32_t width = 0;
    std::vector<RowIndex> rows;
    float* table_base = nullptr;  // the table in pinned host memory
    float* host_rows = nullptr;   // consecutive rows: their place in the table
    float* staging = nullptr;     // scattered rows: a pinned buffer
    bool fetch = true, keep = true;
    uint64_t bytes() const { return rows.size() * width * sizeof(float); }
  };
  // An entry of the schedule: opening or closing access `handle`.
  struct Event {
    bool open = true;
    int handle = 0;
  };

  SwapEngine(device::Device* device, MemoryManager* memory, std::vector<Access> accesses,
             std::vector<Event> prologue, std::vector<Event> iteration, int depth,
             std::chrono::milliseconds timeout);
  ~SwapEngine();  // Stop()

  Status Start();
  // The filled buffer of the next open (which must be of `handle`); waits
  // for the alloc thread, counting the wait as a memory stall.
  StatusOr<float*> Open(int handle);
  // A buffer for the next prefetch: ahead of the application it leaves the
  // plan's peak free for the application; once the application waits for
  // it, it waits for any buffer.
  StatusOr<float*> TakeBuffer(uint64_t bytes);
  // Hands the buffer of `handle` back: written back first if it keeps, in
  // both cases only after the work enqueued on `compute` so far.
  Status Close(int handle, float* buffer, device::Stream* compute);
  // Before the application returns any buffer to the memory manager's pool:
  // marks the point on `compute` after which the alloc thread may copy into
  // it.
  Status NoteRelease(device::Stream* compute);
  // Waits until every write-back handed over so far is done.
  Status Drain();
  void Stop();

 private:
  struct Ready {
    int handle;
    float* buffer;
    Status status;
  };
  void AllocLoop();
  void ReclaimLoop();
  Status CopyIn(const Access& a, float* buffer);
  Status CopyOut(int handle, float* buffer);

  device::Device* device_;
  MemoryManager* memory_;
  const std::vector<Access> accesses_;
  const std::vector<Event> prologue_, iteration_;
  const int depth_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<device::Stream> in_stream_, out_stream_;
  // Recorded on the application's compute stream: at the latest release of
  // a pool buffer (released_), and at each access's Close (close_events_,
  // by handle; the next Close of a handle comes after its write-back).
  std::unique_ptr<device::Event> released_;
  std::vector<std::unique_ptr<device::Event>> close_events_;

  common::Mutex mu_;
  std::condition_variable cv_;
  bool stop_ GEEPS_GUARDED_BY(mu_) = false;
  bool app_waiting_ GEEPS_GUARDED_BY(mu_) = false;  // the application waits in Open
  std::deque<Ready> ready_ GEEPS_GUARDED_BY(mu_);   // prefetched, in open order
  std::deque<std::pair<int, float*>> to_reclaim_ GEEPS_GUARDED_BY(mu_);
  std::vector<int64_t> writebacks_done_ GEEPS_GUARDED_BY(mu_);  // per table
  int64_t writebacks_handed_ GEEPS_GUARDED_BY(mu_) = 0;
  int64_t writebacks_finished_ GEEPS_GUARDED_BY(mu_) = 0;
  Status reclaim_error_ GEEPS_GUARDED_BY(mu_);
  std::thread alloc_thread_, reclaim_thread_;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_SWAP_ENGINE_H_
