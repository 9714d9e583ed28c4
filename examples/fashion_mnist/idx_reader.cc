#include "idx_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

namespace fmnist {
namespace {

using geeps::Status;
using geeps::StatusCode;
using geeps::StatusOr;

// Refuses headers that promise more than this many data bytes (4 GiB): a
// corrupt header must not make us allocate without bound.
constexpr uint64_t kMaxDataBytes = uint64_t{1} << 32;
constexpr size_t kChunkBytes = size_t{1} << 20;

Status Invalid(const std::string& path, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, path + ": " + what);
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// An open IDX file; reads report errors that name the file.
class IdxFile {
 public:
  static StatusOr<IdxFile> Open(const std::string& path) {
    // Without blocking (a FIFO must not stall us), and only a regular file
    // no larger than the most data a header may promise.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      const int err = errno;
      const StatusCode code =
          (err == ENOENT || err == ENOTDIR) ? StatusCode::kNotFound : StatusCode::kInvalidArgument;
      return Status(code, "cannot open " + path + ": " + std::strerror(err));
    }
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (!regular || static_cast<uint64_t>(st.st_size) > kMaxDataBytes + 64) {
      ::close(fd);
      return Invalid(path, regular ? "larger than any data set this reader takes"
                                   : "not a regular file (a FIFO, a device or a directory?)");
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    errno = 0;
    gzFile f = gzdopen(fd, "rb");  // owns fd from here
    if (f == nullptr) {
      ::close(fd);
      return Status(StatusCode::kInvalidArgument, "cannot open " + path + ": out of memory");
    }
    gzbuffer(f, 1 << 17);
    return IdxFile(path, GzFile(f));
  }

  // Reads up to `n` bytes; fewer only at the end of the file. Returns the
  // number read, or an error for an unreadable or corrupt stream.
  StatusOr<size_t> ReadUpTo(void* dst, size_t n) {
    auto* out = static_cast<unsigned char*>(dst);
    size_t done = 0;
    while (done < n) {
      unsigned want = static_cast<unsigned>(std::min(n - done, kChunkBytes));
      int got = gzread(file_.get(), out + done, want);
      if (got < 0) return ReadError();
      if (got == 0) {
        // gzread also returns 0 at the end of a gzip stream that is cut
        // short; gzerror tells the two apart.
        Status s = StreamError();
        if (!s.ok()) return s;
        break;
      }
      done += static_cast<size_t>(got);
    }
    return done;
  }

  // OK if the file has no bytes left.
  Status ExpectEnd() {
    unsigned char extra[256];
    int got = gzread(file_.get(), extra, sizeof(extra));
    if (got < 0) return ReadError();
    if (got > 0) {
      return Invalid(path_,
                     "unexpected trailing bytes after the data (the "
                     "header promises less data than the file has)");
    }
    return StreamError();
  }

  // Reads the magic and the dimensions; checks them against `magic`.
  StatusOr<std::vector<uint32_t>> ReadHeader(uint32_t magic, const char* kind) {
    unsigned char m[4];
    Status s = ReadHeaderWord(m);
    if (!s.ok()) return s;
    uint32_t got = BigEndian(m);
    if (got != magic) {
      return Invalid(path_, "bad IDX magic " + Hex32(got) + " (expected " + Hex32(magic) + " for " +
                                kind + "); is this the right file?");
    }
    const int ndims = static_cast<int>(magic & 0xff);
    std::vector<uint32_t> dims(ndims);
    for (int i = 0; i < ndims; ++i) {
      unsigned char d[4];
      s = ReadHeaderWord(d);
      if (!s.ok()) return s;
      dims[i] = BigEndian(d);
    }
    return dims;
  }

  const std::string& path() const { return path_; }

 private:
  IdxFile(std::string path, GzFile file) : path_(std::move(path)), file_(std::move(file)) {}

  Status ReadHeaderWord(unsigned char* word) {
    StatusOr<size_t> got = ReadUpTo(word, 4);
    if (!got.ok()) return got.status();
    if (*got != 4) {
      return Invalid(path_,
                     "truncated header (the file is too short to be "
                     "an IDX file)");
    }
    return Status::OK();
  }

  static uint32_t BigEndian(const unsigned char* b) {
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  }

  // The error after gzread returned -1 (never OK).
  Status ReadError() {
    Status s = StreamError();
    return s.ok() ? Invalid(path_, "read error") : s;
  }

  // The stream's error state: OK if there is none.
  Status StreamError() {
    int errnum = Z_OK;
    const char* msg = gzerror(file_.get(), &errnum);
    if (errnum == Z_OK || errnum == Z_STREAM_END) return Status::OK();
    std::string text = msg != nullptr ? msg : "unknown zlib error";
    if (errnum == Z_ERRNO) text = std::strerror(errno);
    if (errnum == Z_BUF_ERROR) {
      return Invalid(path_, "truncated gzip stream (" + text + ")");
    }
    return Invalid(path_, "read error: " + text);
  }

  std::string path_;
  GzFile file_;
};

// Reads `count` items of `item_bytes` bytes; `limit` items at most (0 = all).
// Returns the bytes and sets *items_read.
StatusOr<std::vector<uint8_t>> ReadItems(IdxFile& file, uint64_t count, uint64_t item_bytes,
                                         uint64_t limit, const char* what, uint64_t* items_read) {
  const uint64_t n = (limit == 0 || limit >= count) ? count : limit;
  if (item_bytes != 0 && count > kMaxDataBytes / item_bytes) {
    return Invalid(file.path(), "header promises " + std::to_string(count) + " " + what + " of " +
                                    std::to_string(item_bytes) +
                                    " bytes, more than this reader accepts");
  }
  const uint64_t bytes = n * item_bytes;
  std::vector<uint8_t> data;
  // Grow as the data arrives, so that a lying header on a short file fails
  // on the missing bytes rather than on a huge allocation.
  data.reserve(std::min<uint64_t>(bytes, 64 * kChunkBytes));
  uint64_t done = 0;
  while (done < bytes) {
    const size_t step = static_cast<size_t>(std::min<uint64_t>(bytes - done, kChunkBytes));
    data.resize(done + step);
    StatusOr<size_t> got = file.ReadUpTo(data.data() + done, step);
    if (!got.ok()) return got.status();
    done += *got;
    if (*got != step) {
      return Invalid(file.path(), "truncated data: the header promises " + std::to_string(count) +
                                      " " + what + " (" + std::to_string(count * item_bytes) +
                                      " data bytes) but the file ends after " +
                                      std::to_string(done) + " of them");
    }
  }
  if (n == count) {
    Status s = file.ExpectEnd();
    if (!s.ok()) return s;
  }
  *items_read = n;
  return data;
}

}  // namespace

StatusOr<IdxImages> ReadIdxImages(const std::string& path, uint64_t limit) {
  StatusOr<IdxFile> file = IdxFile::Open(path);
  if (!file.ok()) return file.status();
  StatusOr<std::vector<uint32_t>> dims =
      file->ReadHeader(kIdxImagesMagic, "images: unsigned bytes, 3 dimensions");
  if (!dims.ok()) return dims.status();
  const uint32_t count = (*dims)[0], rows = (*dims)[1], cols = (*dims)[2];
  if (count == 0 || rows == 0 || cols == 0) {
    return Invalid(path, "bad dimensions " + std::to_string(count) + " x " + std::to_string(rows) +
                             " x " + std::to_string(cols) + " (none may be zero)");
  }
  uint64_t n = 0;
  StatusOr<std::vector<uint8_t>> bytes =
      ReadItems(*file, count, uint64_t{rows} * cols, limit, "images", &n);
  if (!bytes.ok()) return bytes.status();
  IdxImages images;
  images.count = static_cast<uint32_t>(n);
  images.rows = rows;
  images.cols = cols;
  images.pixels.resize(bytes->size());
  constexpr float kScale = 1.0f / 255.0f;
  std::transform(bytes->begin(), bytes->end(), images.pixels.begin(),
                 [](uint8_t b) { return static_cast<float>(b) * kScale; });
  return images;
}

StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path, uint64_t limit) {
  StatusOr<IdxFile> file = IdxFile::Open(path);
  if (!file.ok()) return file.status();
  StatusOr<std::vector<uint32_t>> dims =
      file->ReadHeader(kIdxLabelsMagic, "labels: unsigned bytes, 1 dimension");
  if (!dims.ok()) return dims.status();
  const uint32_t count = (*dims)[0];
  if (count == 0) return Invalid(path, "bad dimensions: zero labels");
  uint64_t n = 0;
  return ReadItems(*file, count, 1, limit, "labels", &n);
}

}  // namespace fmnist
