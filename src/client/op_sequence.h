// The recorded virtual iteration: the operations, their handles and rows, and
// the checks that make a recording well formed. Pure bookkeeping: no device,
// no threads. Used only by the application thread.
#ifndef GEEPS_CLIENT_OP_SEQUENCE_H_
#define GEEPS_CLIENT_OP_SEQUENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "geeps/config.h"
#include "geeps/geeps.h"
#include "geeps/status.h"

namespace geeps::client {

enum class OpType { kRead, kPostRead, kPreUpdate, kUpdate, kLocalAccess, kPostLocalAccess, kClock };

struct Op {
  OpType type;
  int32_t handle;  // index into reads/updates/locals; -1 for kClock
};

enum Section { kRepeated = 0, kPrologue = 1 };

struct RecordedAccess {
  TableId table = 0;
  std::vector<RowIndex> rows;
  Section section = kRepeated;
  bool open = true;
  int slack = 0;           // reads
  bool fetch = true;       // local accesses
  bool keep = true;        // local accesses
  bool read_only = false;  // local accesses recorded by VirtualLocalRead
  bool zeroed = true;      // updates: PreUpdate's buffer is zeroed
  // A local access whose rows go back where they came from at its end:
  // kept, and possibly written (a read-only access leaves them unchanged).
  bool writes_back() const { return keep && !read_only; }
};

class OpSequence {
 public:
  explicit OpSequence(const Config* config) : config_(config) {}

  StatusOr<ReadHandle> AddRead(TableId table, const std::vector<RowIndex>& rows, int slack);
  Status AddPostRead(ReadHandle h);
  StatusOr<UpdateHandle> AddPreUpdate(TableId table, const std::vector<RowIndex>& rows,
                                      bool zeroed = true);
  Status AddUpdate(UpdateHandle h);
  StatusOr<LocalHandle> AddLocalAccess(TableId table, const std::vector<RowIndex>& rows, bool fetch,
                                       bool read_only = false);
  Status AddPostLocalAccess(LocalHandle h, bool keep);
  Status AddClock();
  // Checks the recording is complete (VirtualClock seen, nothing left open).
  Status Finish() const;

  const std::vector<Op>& ops(Section s) const { return ops_[s]; }
  const std::vector<RecordedAccess>& reads() const { return reads_; }
  const std::vector<RecordedAccess>& updates() const { return updates_; }
  const std::vector<RecordedAccess>& locals() const { return locals_; }
  bool clocked() const { return clocked_; }

  // "Read(read#2)" etc., for error messages.
  static std::string Describe(const Op& op);

 private:
  Status CheckRows(TableId table, const std::vector<RowIndex>& rows, bool want_local,
                   const char* call) const;
  // Records the opening op of an access and returns its handle id.
  int32_t Open(std::vector<RecordedAccess>& list, OpType type, RecordedAccess a);
  // Records the closing op of access `id` after checking it is open.
  Status Post(std::vector<RecordedAccess>& list, OpType type, int32_t id, const char* what,
              const char* call);
  Status Close(std::vector<RecordedAccess>& list, int32_t id, const char* what, const char* call);
  Status CheckNothingOpen(const char* when) const;

  const Config* config_;
  std::vector<Op> ops_[2];
  std::vector<RecordedAccess> reads_, updates_, locals_;
  bool clocked_ = false;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_OP_SEQUENCE_H_
