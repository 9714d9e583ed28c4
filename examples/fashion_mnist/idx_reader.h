// Reads IDX files, the format of MNIST and Fashion-MNIST, gzip-compressed or
// plain (zlib reads plain files transparently).
//
// An IDX file is a 4-byte magic number (two zero bytes, a type byte - 0x08 for
// unsigned bytes - and the number of dimensions), one big-endian uint32 per
// dimension, then the data, row-major. Images are 3-dimensional (count, rows,
// cols), labels 1-dimensional (count).
//
// Errors (never exceptions, never aborts):
//   kNotFound        the file does not exist;
//   kInvalidArgument the file cannot be read or is not a valid IDX file of the
//                    expected kind (bad magic, zero or absurd dimensions,
//                    truncated data, trailing bytes, corrupt gzip stream).
// Every message names the file.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_IDX_READER_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "geeps/status.h"

namespace fmnist {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned bytes, 3 dims
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned bytes, 1 dim

struct IdxImages {
  uint32_t count = 0;  // images read (at most the limit)
  uint32_t rows = 0;
  uint32_t cols = 0;
  // count * rows * cols pixels, image after image, row-major, each the byte
  // divided by 255 (so in [0, 1]).
  std::vector<float> pixels;
};

// Reads the first `limit` images of the file at `path` (0 = all; a limit
// above the file's count reads all). The whole file is validated only when
// it is read to its end (limit 0 or >= count): only then are trailing bytes
// detected.
geeps::StatusOr<IdxImages> ReadIdxImages(const std::string& path, uint64_t limit = 0);

// Reads the first `limit` labels (0 = all) of the file at `path`.
geeps::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path, uint64_t limit = 0);

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_IDX_READER_H_
