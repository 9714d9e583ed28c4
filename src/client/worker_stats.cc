// Worker::GetStats (any thread): the worker's counters as WorkerStats.
#include "client/worker.h"
#include "common/mutex.h"

namespace geeps::client {

WorkerStats Worker::GetStats() const {
  WorkerStats s;
  s.rank = rank_;
  s.clock = clock_.load();
  s.iterations = iterations_.load();
  s.read_wait_seconds = static_cast<double>(read_wait_ns_.load()) * 1e-9;
  s.reads_waited = reads_waited_.load();
  s.waits_spun = waits_spun_.load();
  s.waits_ended_spinning = waits_ended_spinning_.load();
  s.asks_read_order = asks_read_order_.load();
  s.push_order_switches = push_order_switches_.load();
  s.messages_sent = counters_.messages_sent.load();
  s.messages_received = counters_.messages_received.load();
  s.bytes_sent = counters_.bytes_sent.load();
  s.bytes_received = counters_.bytes_received.load();
  s.pushes_installed = counters_.pushes_installed.load();
  s.pushes_installed_by_app = counters_.pushes_installed_by_app.load();
  s.pushes_adopted = counters_.pushes_adopted.load();
  s.updates_direct = updates_direct_.load();
  s.reads_in_place = reads_in_place_.load();
  s.frames_dropped = counters_.frames_dropped.load();
  s.connection_losses = counters_.connection_losses.load();
  s.reconnects = counters_.reconnects.load();
  s.updates_resent = counters_.updates_resent.load();
  s.pushes_repeated = counters_.pushes_repeated.load();
  s.data_path.gather = counters_.gather_bytes.load();
  s.data_path.zero = counters_.zero_bytes.load();
  s.data_path.scatter_add = counters_.scatter_add_bytes.load();
  s.data_path.to_slot = counters_.to_slot_bytes.load();
  s.data_path.pack = counters_.pack_bytes.load();
  s.data_path.install = counters_.install_bytes.load();
  s.data_path.app_copies = counters_.app_copy_bytes.load();
  s.device_bytes_in_use = device_bytes_.load();
  {
    common::MutexLock name_lock(&device_name_mu_);
    s.device = device_name_;
  }
  if (tables_ready_.load(std::memory_order_acquire) && data_->memory())
    data_->memory()->FillStats(&s);
  return s;
}

}  // namespace geeps::client
