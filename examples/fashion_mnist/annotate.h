// Errors of the example trainers name the worker and the libgeeps call that
// failed: EX_CHECK(ps.Read(h), "Read") returns "worker 1: Read: <message>"
// (unless libgeeps' message already names the worker). Both macros expect a
// variable `rank` (the worker's) in scope. Context() names a call that is not
// a worker's (starting or joining a job).
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_ANNOTATE_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_ANNOTATE_H_

#include <string>

#include "geeps/status.h"

namespace fmnist {

inline geeps::Status Annotate(const geeps::Status& s, int rank, const char* call) {
  if (s.ok()) return s;
  const std::string who = "worker " + std::to_string(rank);
  if (s.message().find(who) != std::string::npos) return s;
  return geeps::Status(s.code(), who + ": " + call + ": " + s.message());
}

template <typename T>
geeps::StatusOr<T> Annotate(geeps::StatusOr<T> s, int rank, const char* call) {
  if (s.ok()) return s;
  return Annotate(s.status(), rank, call);
}

// `s` with the failed call's name in front ("Process::Join: <message>").
inline geeps::Status Context(const geeps::Status& s, const std::string& call) {
  if (s.ok()) return s;
  return geeps::Status(s.code(), call + ": " + s.message());
}

template <typename T>
geeps::StatusOr<T> Context(geeps::StatusOr<T> s, const std::string& call) {
  if (s.ok()) return s;
  return Context(s.status(), call);
}

}  // namespace fmnist

#define EX_CHECK(expr, call) GEEPS_RETURN_IF_ERROR(::fmnist::Annotate((expr), rank, call))
#define EX_ASSIGN(lhs, expr, call) \
  GEEPS_ASSIGN_OR_RETURN(lhs, ::fmnist::Annotate((expr), rank, call))

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_ANNOTATE_H_
