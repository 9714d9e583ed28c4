// Which GeePS a handle belongs to: the worker whose Virtual* call returned
// it stamps it with its rank and its instance number (unique in the
// process), and every call that takes a handle checks the stamp, so a
// handle of another worker (or of a worker of another cluster or job) is
// an error naming both instead of naming this worker's operation of the
// same number (docs/api.md, "Handles").
#ifndef GEEPS_CLIENT_HANDLE_OWNER_H_
#define GEEPS_CLIENT_HANDLE_OWNER_H_

#include <cstdint>

#include "geeps/status.h"

namespace geeps::client {

struct HandleOwner {
  int32_t worker = -1;
  uint32_t instance = 0;  // 0: not stamped (made by hand)
};

template <class Handle>
HandleOwner OwnerOf(const Handle& h) {
  return {h.worker, h.instance};
}

// A fresh instance number for a new worker: 1, 2, ... in this process.
uint32_t NextWorkerInstance();

// OK when `stamp` is `self`, or when `id` is negative (the caller's check
// of unknown handles names that case); kInvalidArgument otherwise, naming
// the call, the handle (`kind`: "ReadHandle") and both owners.
Status CheckHandleOwner(const char* call, const char* kind, int32_t id, HandleOwner stamp,
                        HandleOwner self);

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_HANDLE_OWNER_H_
