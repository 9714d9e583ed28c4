#include "client/handle_owner.h"

#include <atomic>
#include <string>

namespace geeps::client {

uint32_t NextWorkerInstance() {
  static std::atomic<uint32_t> next{1};
  return next.fetch_add(1);
}

Status CheckHandleOwner(const char* call, const char* kind, int32_t id, HandleOwner stamp,
                        HandleOwner self) {
  if (id < 0 || (stamp.worker == self.worker && stamp.instance == self.instance))
    return Status::OK();
  const std::string me = "worker " + std::to_string(self.worker);
  if (stamp.instance == 0)
    return InvalidArgumentError(std::string(call) + ": " + kind + " #" + std::to_string(id) +
                                " was not returned by a GeePS call (made by hand?); " + me +
                                " takes only the handles its own Virtual* calls returned");
  if (stamp.worker != self.worker)
    return InvalidArgumentError(std::string(call) + " on " + me + ": " + kind + " #" +
                                std::to_string(id) + " belongs to worker " +
                                std::to_string(stamp.worker) +
                                " (its Virtual* call returned it); each worker uses the handles "
                                "of its own virtual iteration");
  return InvalidArgumentError(
      std::string(call) + " on " + me + " (instance " + std::to_string(self.instance) +
      "): " + kind + " #" + std::to_string(id) + " belongs to another GeePS of rank " +
      std::to_string(stamp.worker) + " (instance " + std::to_string(stamp.instance) +
      ": a worker of another cluster, process or job)");
}

}  // namespace geeps::client
