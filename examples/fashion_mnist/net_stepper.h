// Stepper: lets one function describe a training iteration for both phases
// of libgeeps. In the virtual phase each Open/Close records the Virtual*
// call and keeps its handle; in the real phase the same calls, made in the
// same order, replay those handles and return the buffers. A trainer writes
// its iteration once, computing only `if (stepper.real())`, so the recorded
// and the real sequences cannot drift apart.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_NET_STEPPER_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_NET_STEPPER_H_

#include <string>
#include <vector>

#include "geeps/geeps.h"
#include "geeps/status.h"

namespace fmnist {

class Stepper {
 public:
  // An open access: the buffer (null in the virtual phase) and its slot.
  struct Open {
    int slot = -1;
    float* data = nullptr;
  };

  explicit Stepper(geeps::GeePS& ps) : ps_(ps) {}

  bool real() const { return real_; }
  // Switches to the real phase (after StartIterations) and rewinds; call
  // Rewind() before every further replay (every iteration).
  void StartReal() { real_ = true; Rewind(); }
  void Rewind() { cursor_ = 0; }

  geeps::StatusOr<Open> OpenRead(geeps::TableId table,
                                 const std::vector<geeps::RowIndex>& rows,
                                 int slack);
  geeps::StatusOr<Open> OpenUpdate(geeps::TableId table,
                                   const std::vector<geeps::RowIndex>& rows);
  geeps::StatusOr<Open> OpenLocal(geeps::TableId table,
                                  const std::vector<geeps::RowIndex>& rows,
                                  bool fetch);
  // PostRead / Update / PostLocalAccess. `keep` matters only for a local
  // access in the virtual phase (the real phase uses the recorded one).
  geeps::Status Close(const Open& open, bool keep = true);

 private:
  enum class Kind { kRead, kUpdate, kLocal };
  struct Slot {
    Kind kind;
    geeps::ReadHandle read;
    geeps::UpdateHandle update;
    geeps::LocalHandle local;
  };
  geeps::StatusOr<int> NextSlot(Kind kind);

  geeps::GeePS& ps_;
  bool real_ = false;
  std::vector<Slot> slots_;
  size_t cursor_ = 0;
};

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_NET_STEPPER_H_
