// Status and StatusOr<T>: the error values returned across the libgeeps API.
// No exception ever crosses the API; every fallible call returns one of these.
#ifndef GEEPS_STATUS_H_
#define GEEPS_STATUS_H_

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "geeps/export.h"

namespace geeps {

// Error codes say whose fault an error is (after NCCL's taxonomy).
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // the caller passed a bad value (config, rows, handle)
  kFailedPrecondition = 2,  // wrong call order / wrong phase (a usage error)
  kOutOfRange = 3,          // a row index or table id outside its range
  kNotFound = 4,            // an unknown name
  kResourceExhausted = 5,   // out of (device) memory or another budget
  kUnavailable = 6,         // a peer (worker, shard) is gone or unreachable
  kDeadlineExceeded = 7,    // a wait ran past its deadline
  kCancelled = 8,           // the instance was shut down while the call waited
  kDeviceError = 9,         // the device backend (host or CUDA) failed
  kInternal = 10,           // a broken invariant inside libgeeps (a bug)
  kDataLoss = 11,           // stored data (a checkpoint file) is truncated or corrupt
  kUnknown = 12,            // the application's own code failed in a way libgeeps cannot
                            // classify (an exception thrown by a worker function)
};

// The code's name without its k ("InvalidArgument"), as ToString writes it.
GEEPS_EXPORT const char* StatusCodeName(StatusCode code);

class [[nodiscard]] GEEPS_EXPORT Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }

  // Whether it is OK; its code; its message ("" when OK).
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

// A Status of each error code with `message` (what failed and why).
GEEPS_EXPORT Status InvalidArgumentError(std::string message);
GEEPS_EXPORT Status FailedPreconditionError(std::string message);
GEEPS_EXPORT Status OutOfRangeError(std::string message);
GEEPS_EXPORT Status NotFoundError(std::string message);
GEEPS_EXPORT Status ResourceExhaustedError(std::string message);
GEEPS_EXPORT Status UnavailableError(std::string message);
GEEPS_EXPORT Status DeadlineExceededError(std::string message);
GEEPS_EXPORT Status CancelledError(std::string message);
GEEPS_EXPORT Status DeviceError(std::string message);
GEEPS_EXPORT Status InternalError(std::string message);
GEEPS_EXPORT Status DataLossError(std::string message);
GEEPS_EXPORT Status UnknownError(std::string message);

// Either a value of type T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // REQUIRES: !status.ok()  (an OK status without a value becomes kInternal).
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = InternalError("StatusOr built from OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT

  // Whether it holds a value; its status (OK when it does).
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // The value. REQUIRES: ok(); on an error the process stops (abort) with a
  // message naming the error, never reads a value that is not there.
  T& value() & { return (Check(), *value_); }
  const T& value() const& { return (Check(), *value_); }
  T&& value() && { return (Check(), std::move(*value_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Check() const {
    if (value_.has_value()) return;
    std::fprintf(stderr, "geeps::StatusOr: value() of an error: %s\n", status_.ToString().c_str());
    std::abort();
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace geeps

#define GEEPS_STATUS_CONCAT_INNER_(a, b) a##b
#define GEEPS_STATUS_CONCAT_(a, b) GEEPS_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define GEEPS_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::geeps::Status geeps_status_ = (expr);        \
    if (!geeps_status_.ok()) return geeps_status_; \
  } while (0)

// `lhs = value of expr` (a StatusOr), or returns its error.
#define GEEPS_ASSIGN_OR_RETURN(lhs, expr) \
  GEEPS_ASSIGN_OR_RETURN_IMPL_(GEEPS_STATUS_CONCAT_(geeps_so_, __LINE__), lhs, expr)
#define GEEPS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#endif  // GEEPS_STATUS_H_
