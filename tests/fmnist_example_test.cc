// Tests of the Fashion-MNIST example (examples/fashion_mnist): the IDX
// reader, the softmax math, the distributed trainer and the softmax_fmnist
// binary's multi-process mode.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "hostile_files.h"
#include "idx_reader.h"
#include "process_util.h"
#include "softmax_model.h"
#include "softmax_trainer.h"
#include "test_paths.h"

extern char** environ;

namespace fmnist {
namespace {

namespace fs = std::filesystem;
using geeps::StatusCode;

// ---- Helpers ---------------------------------------------------------------

// A fresh temporary folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::path(::testing::TempDir()) / ("fmnist_test_" + std::to_string(::getpid()) + "_" +
                                              info->test_suite_name() + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void PutBigEndian(std::vector<uint8_t>* out, uint32_t v) {
  out->push_back(static_cast<uint8_t>(v >> 24));
  out->push_back(static_cast<uint8_t>(v >> 16));
  out->push_back(static_cast<uint8_t>(v >> 8));
  out->push_back(static_cast<uint8_t>(v));
}

std::vector<uint8_t> IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  PutBigEndian(&out, magic);
  for (uint32_t d : dims) PutBigEndian(&out, d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void WriteGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

void WritePlain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::vector<uint8_t> Iota(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 % 256);
  return v;
}

// ---- IDX reader ------------------------------------------------------------

TEST(IdxReaderTest, ReadsImagesAsFloatsInZeroOne) {
  TempDir dir;
  const std::vector<uint8_t> pixels = {0, 255, 128, 1, 2, 3,   // image 0 (2x3)
                                       9, 8,   7,   6, 5, 4};  // image 1
  WriteGz(dir.File("img.gz"), IdxBytes(kIdxImagesMagic, {2, 2, 3}, pixels));
  geeps::StatusOr<IdxImages> images = ReadIdxImages(dir.File("img.gz"));
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 2u);
  EXPECT_EQ(images->rows, 2u);
  EXPECT_EQ(images->cols, 3u);
  ASSERT_EQ(images->pixels.size(), pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) {
    EXPECT_FLOAT_EQ(images->pixels[i], pixels[i] / 255.0f) << i;
  }
  EXPECT_EQ(images->pixels[0], 0.0f);
  EXPECT_EQ(images->pixels[1], 1.0f);
}

TEST(IdxReaderTest, ReadsLabels) {
  TempDir dir;
  const std::vector<uint8_t> labels = {3, 1, 4, 1, 5, 9, 2, 6};
  WriteGz(dir.File("lab.gz"), IdxBytes(kIdxLabelsMagic, {8}, labels));
  geeps::StatusOr<std::vector<uint8_t>> got = ReadIdxLabels(dir.File("lab.gz"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, labels);
}

TEST(IdxReaderTest, LimitReadsAPrefix) {
  TempDir dir;
  const std::vector<uint8_t> pixels = Iota(size_t{5} * 4 * 4);
  WriteGz(dir.File("img.gz"), IdxBytes(kIdxImagesMagic, {5, 4, 4}, pixels));
  WriteGz(dir.File("lab.gz"), IdxBytes(kIdxLabelsMagic, {5}, {0, 1, 2, 3, 4}));
  geeps::StatusOr<IdxImages> images = ReadIdxImages(dir.File("img.gz"), 2);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 2u);
  ASSERT_EQ(images->pixels.size(), 2u * 16);
  EXPECT_FLOAT_EQ(images->pixels[31], pixels[31] / 255.0f);
  geeps::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(dir.File("lab.gz"), 3);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(*labels, (std::vector<uint8_t>{0, 1, 2}));
  // A limit above the count reads everything.
  labels = ReadIdxLabels(dir.File("lab.gz"), 100);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->size(), 5u);
}

TEST(IdxReaderTest, ReadsUncompressedFilesToo) {
  TempDir dir;
  WritePlain(dir.File("lab"), IdxBytes(kIdxLabelsMagic, {3}, {7, 8, 9}));
  geeps::StatusOr<std::vector<uint8_t>> got = ReadIdxLabels(dir.File("lab"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::vector<uint8_t>{7, 8, 9}));
}

TEST(IdxReaderTest, MissingFileIsNotFound) {
  TempDir dir;
  const std::string path = dir.File("no-such-file.gz");
  geeps::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), StatusCode::kNotFound);
  EXPECT_NE(images.status().message().find(path), std::string::npos) << images.status();
  geeps::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(dir.File("missing-dir/labels.gz"));
  ASSERT_FALSE(labels.ok());
  EXPECT_EQ(labels.status().code(), StatusCode::kNotFound);
}

// A data set file replaced by a FIFO (before: gzopen blocked for good), a
// symlink to /dev/zero, a directory or a file larger than any data set: an
// error naming it, at once.
TEST(IdxReaderTest, FilesThatAreNotDataAreRefusedWithoutReadingThem) {
  TempDir dir;
  const std::string path = dir.File("images.gz");
  const auto kinds = geeps::testing::HostileKinds();
  for (size_t k = 0; k < kinds.size(); ++k) {
    ASSERT_TRUE(geeps::testing::MakeHostileFile(path, k, (uint64_t{1} << 32) + 4096))
        << kinds[k].kind;
    geeps::StatusOr<IdxImages> images = ReadIdxImages(path);
    ASSERT_FALSE(images.ok()) << kinds[k].kind;
    EXPECT_EQ(images.status().code(), StatusCode::kInvalidArgument) << kinds[k].kind;
    EXPECT_NE(images.status().message().find(path), std::string::npos) << images.status();
  }
  ::rmdir(path.c_str());
  ::unlink(path.c_str());
}

TEST(IdxReaderTest, BadMagicIsAnError) {
  TempDir dir;
  // A labels file where images are expected, and the reverse.
  WriteGz(dir.File("lab.gz"), IdxBytes(kIdxLabelsMagic, {2}, {1, 2}));
  geeps::StatusOr<IdxImages> images = ReadIdxImages(dir.File("lab.gz"));
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(images.status().message().find("magic"), std::string::npos) << images.status();
  EXPECT_NE(images.status().message().find("0x00000801"), std::string::npos) << images.status();
  WriteGz(dir.File("img.gz"), IdxBytes(kIdxImagesMagic, {1, 1, 1}, {5}));
  geeps::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(dir.File("img.gz"));
  ASSERT_FALSE(labels.ok());
  EXPECT_NE(labels.status().message().find("magic"), std::string::npos);
  // Not an IDX file at all.
  WriteGz(dir.File("text.gz"), {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r'});
  labels = ReadIdxLabels(dir.File("text.gz"));
  ASSERT_FALSE(labels.ok());
  EXPECT_NE(labels.status().message().find("magic"), std::string::npos);
}

TEST(IdxReaderTest, TruncatedDataIsAnError) {
  TempDir dir;
  std::vector<uint8_t> pixels = Iota(size_t{3} * 2 * 2);
  pixels.resize(pixels.size() - 1);  // one byte short
  WriteGz(dir.File("img.gz"), IdxBytes(kIdxImagesMagic, {3, 2, 2}, pixels));
  geeps::StatusOr<IdxImages> images = ReadIdxImages(dir.File("img.gz"));
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(images.status().message().find("truncated"), std::string::npos) << images.status();
  // But a limit that stops before the missing byte is fine.
  images = ReadIdxImages(dir.File("img.gz"), 2);
  EXPECT_TRUE(images.ok()) << images.status();
}

TEST(IdxReaderTest, TruncatedHeaderIsAnError) {
  TempDir dir;
  std::vector<uint8_t> bytes = IdxBytes(kIdxImagesMagic, {3, 2, 2}, {});
  bytes.resize(9);
  WriteGz(dir.File("img.gz"), bytes);
  geeps::StatusOr<IdxImages> images = ReadIdxImages(dir.File("img.gz"));
  ASSERT_FALSE(images.ok());
  EXPECT_NE(images.status().message().find("truncated"), std::string::npos) << images.status();
  WriteGz(dir.File("empty.gz"), {});
  images = ReadIdxImages(dir.File("empty.gz"));
  ASSERT_FALSE(images.ok());
  EXPECT_NE(images.status().message().find("truncated"), std::string::npos) << images.status();
}

TEST(IdxReaderTest, TruncatedGzipStreamIsAnError) {
  TempDir dir;
  WriteGz(dir.File("full.gz"), IdxBytes(kIdxImagesMagic, {50, 28, 28}, Iota(size_t{50} * 28 * 28)));
  // Cut the compressed file in half.
  std::ifstream in(dir.File("full.gz"), std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(gz.size(), 100u);
  gz.resize(gz.size() / 2);
  WritePlain(dir.File("cut.gz"), gz);
  geeps::StatusOr<IdxImages> images = ReadIdxImages(dir.File("cut.gz"));
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(images.status().message().find("truncated"), std::string::npos) << images.status();
}

TEST(IdxReaderTest, TrailingBytesAreAnError) {
  TempDir dir;
  WriteGz(dir.File("lab.gz"), IdxBytes(kIdxLabelsMagic, {2}, {1, 2, 3}));
  geeps::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(dir.File("lab.gz"));
  ASSERT_FALSE(labels.ok());
  EXPECT_NE(labels.status().message().find("trailing"), std::string::npos) << labels.status();
}

TEST(IdxReaderTest, ZeroOrHugeDimensionsAreErrors) {
  TempDir dir;
  WriteGz(dir.File("zero.gz"), IdxBytes(kIdxImagesMagic, {0, 28, 28}, {}));
  geeps::StatusOr<IdxImages> images = ReadIdxImages(dir.File("zero.gz"));
  ASSERT_FALSE(images.ok());
  EXPECT_NE(images.status().message().find("dimensions"), std::string::npos) << images.status();
  // A header promising ~3 TB must fail cleanly, not try to allocate it.
  WriteGz(dir.File("huge.gz"), IdxBytes(kIdxImagesMagic, {0xffffffffu, 28, 28}, Iota(100)));
  images = ReadIdxImages(dir.File("huge.gz"));
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), StatusCode::kInvalidArgument);
  // Large but acceptable: fails on the missing data.
  WriteGz(dir.File("big.gz"), IdxBytes(kIdxImagesMagic, {1000000, 28, 28}, Iota(100)));
  images = ReadIdxImages(dir.File("big.gz"));
  ASSERT_FALSE(images.ok());
  EXPECT_NE(images.status().message().find("truncated"), std::string::npos) << images.status();
}

TEST(LoadFashionMnistTest, ChecksThatImagesAndLabelsAgree) {
  TempDir dir;
  auto write_split = [&](const std::string& prefix, uint32_t n_images,
                         const std::vector<uint8_t>& labels) {
    WriteGz(dir.File(prefix + "-images-idx3-ubyte.gz"),
            IdxBytes(kIdxImagesMagic, {n_images, 2, 2}, Iota(size_t{n_images} * 4)));
    const uint32_t n_labels = static_cast<uint32_t>(labels.size());
    WriteGz(dir.File(prefix + "-labels-idx1-ubyte.gz"),
            IdxBytes(kIdxLabelsMagic, {n_labels}, labels));
  };
  const std::string root = dir.File("");
  Dataset train, test;
  write_split("train", 3, {0, 1, 9});
  write_split("t10k", 2, {2, 3});
  geeps::Status s = LoadFashionMnist(root, 0, &train, &test);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(train.size(), 3);
  EXPECT_EQ(train.dim, 4);
  EXPECT_EQ(train.num_classes, 10);
  EXPECT_EQ(test.size(), 2);

  s = LoadFashionMnist(root, 2, &train, &test);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(train.size(), 2);

  write_split("train", 3, {0, 1});
  s = LoadFashionMnist(root, 0, &train, &test);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;

  write_split("train", 3, {0, 1, 10});
  s = LoadFashionMnist(root, 0, &train, &test);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("label 10"), std::string::npos) << s;

  s = LoadFashionMnist(dir.File("nowhere"), 0, &train, &test);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
}

// ---- Softmax math ----------------------------------------------------------

// A small random data set: `n` examples of `dim` features in [0, 1] (about a
// third of them zero, as in images).
Dataset RandomDataset(int n, int dim, int classes, uint64_t seed) {
  Dataset d;
  d.dim = dim;
  d.num_classes = classes;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int i = 0; i < n * dim; ++i) {
    const float v = u(rng);
    d.features.push_back(v < 0.33f ? 0.0f : v);
  }
  for (int i = 0; i < n; ++i) {
    d.labels.push_back(static_cast<uint8_t>(rng() % classes));
  }
  return d;
}

std::vector<float> RandomParams(int dim, int classes, uint64_t seed) {
  std::vector<float> p(NumParams(dim, classes));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (float& v : p) v = normal(rng);
  return p;
}

TEST(SoftmaxModelTest, LogitsUseTheRowPerFeatureLayout) {
  // dim 2, 3 classes: rows {w0}, {w1}, {bias}.
  const std::vector<float> params = {1,    2,  3,  //
                                     4,    5,  6,  //
                                     0.5f, -1, 0};
  const float x[2] = {2, 0.5f};
  float z[3];
  ComputeLogits(params.data(), 2, 3, x, z);
  EXPECT_FLOAT_EQ(z[0], 0.5f + 2 * 1 + 0.5f * 4);
  EXPECT_FLOAT_EQ(z[1], -1 + 2 * 2 + 0.5f * 5);
  EXPECT_FLOAT_EQ(z[2], 0 + 2 * 3 + 0.5f * 6);
}

TEST(SoftmaxModelTest, ZeroParamsGiveLogOfClassCount) {
  const Dataset d = RandomDataset(7, 5, 10, 1);
  const std::vector<float> zero(NumParams(5, 10), 0.0f);
  std::vector<int64_t> all(7);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_NEAR(LossAndGradient(zero.data(), d, all.data(), all.size(), nullptr), std::log(10.0),
              1e-6);
  EXPECT_NEAR(Evaluate(zero.data(), d).loss, std::log(10.0), 1e-6);
}

TEST(SoftmaxModelTest, GradientMatchesFiniteDifferences) {
  const int dim = 6, classes = 4;
  const Dataset d = RandomDataset(9, dim, classes, 7);
  std::vector<float> params = RandomParams(dim, classes, 11);
  // A batch with a repeated example and not in order.
  const std::vector<int64_t> batch = {4, 0, 8, 4, 2};
  std::vector<float> grad(params.size(), 123.0f);  // must be overwritten
  const double loss = LossAndGradient(params.data(), d, batch.data(), batch.size(), grad.data());
  EXPECT_GT(loss, 0.0);
  const float eps = 1e-2f;
  for (size_t j = 0; j < params.size(); ++j) {
    const float saved = params[j];
    params[j] = saved + eps;
    const double up = LossAndGradient(params.data(), d, batch.data(), batch.size(), nullptr);
    params[j] = saved - eps;
    const double down = LossAndGradient(params.data(), d, batch.data(), batch.size(), nullptr);
    params[j] = saved;
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(grad[j], numeric, 2e-4 + 1e-3 * std::fabs(numeric))
        << "parameter " << j << " (row " << j / classes << ", class " << j % classes << ")";
  }
}

TEST(SoftmaxModelTest, EvaluateCountsArgmaxHits) {
  // dim 1, 2 classes: class 1 wins iff x > 0.5.
  Dataset d;
  d.dim = 1;
  d.num_classes = 2;
  d.features = {0.1f, 0.9f, 0.8f, 0.2f};
  d.labels = {0, 1, 0, 0};
  const std::vector<float> params = {0, 10,  //
                                     0, -5};
  Evaluation ev = Evaluate(params.data(), d);
  EXPECT_DOUBLE_EQ(ev.accuracy, 0.75);
  EXPECT_GT(ev.loss, 0.0);
}

TEST(SoftmaxModelTest, GradientDescentLowersTheLoss) {
  const Dataset d = RandomDataset(40, 8, 3, 3);
  std::vector<float> params(NumParams(8, 3), 0.0f), grad(params.size());
  std::vector<int64_t> all(40);
  std::iota(all.begin(), all.end(), 0);
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    last = LossAndGradient(params.data(), d, all.data(), all.size(), grad.data());
    if (step == 0) first = last;
    for (size_t j = 0; j < params.size(); ++j) params[j] -= 0.5f * grad[j];
  }
  EXPECT_LT(last, first * 0.9);
}

// ---- The distributed trainer -----------------------------------------------

TEST(TrainSoftmaxTest, RejectsBadOptions) {
  const Dataset d = RandomDataset(10, 3, 2, 1);
  TrainReport report;
  TrainOptions o;
  o.workers = 0;
  EXPECT_EQ(TrainSoftmax(o, d, d, &report).code(), StatusCode::kInvalidArgument);
  o = TrainOptions();
  o.batch_size = 0;
  EXPECT_EQ(TrainSoftmax(o, d, d, &report).code(), StatusCode::kInvalidArgument);
  o = TrainOptions();
  o.learning_rate = std::nanf("");
  EXPECT_EQ(TrainSoftmax(o, d, d, &report).code(), StatusCode::kInvalidArgument);
  o = TrainOptions();
  o.workers = 11;  // more workers than examples
  EXPECT_EQ(TrainSoftmax(o, d, d, &report).code(), StatusCode::kInvalidArgument);
}

struct ClusterShape {
  int workers;
  int shards;
  int channels;
};

class TrainSoftmaxExactTest : public ::testing::TestWithParam<ClusterShape> {};

// Full-batch gradient descent on a tiny set: each worker's batch is its whole
// shard, so with BSP the parameters after each epoch are exactly (up to float
// rounding) p <- p - lr_e * mean over workers of grad(shard r at p).
TEST_P(TrainSoftmaxExactTest, StepsOnTheAverageGradient) {
  const ClusterShape shape = GetParam();
  const int dim = 5, classes = 3, n = 12;
  const Dataset d = RandomDataset(n, dim, classes, 5);
  TrainOptions o;
  o.workers = shape.workers;
  o.shards = shape.shards;
  o.channels = shape.channels;
  o.epochs = 3;
  o.batch_size = n;  // one iteration per epoch
  o.learning_rate = 0.5f;
  o.lr_decay = 0.5f;
  o.momentum = 0;
  o.init_stddev = 0;
  o.timeout = std::chrono::milliseconds(20000);
  TrainReport report;
  geeps::Status s = TrainSoftmax(o, d, d, &report);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(report.epochs.size(), 3u);

  std::vector<float> p(NumParams(dim, classes), 0.0f), g(p.size());
  float lr = o.learning_rate;
  for (int e = 0; e < o.epochs; ++e) {
    std::vector<float> sum(p.size(), 0.0f);
    for (int r = 0; r < o.workers; ++r) {
      std::vector<int64_t> shard;
      for (int64_t i = r; i < n; i += o.workers) shard.push_back(i);
      LossAndGradient(p.data(), d, shard.data(), shard.size(), g.data());
      for (size_t j = 0; j < p.size(); ++j) sum[j] += g[j];
    }
    for (size_t j = 0; j < p.size(); ++j) p[j] -= lr * sum[j] / o.workers;
    lr *= o.lr_decay;
  }
  ASSERT_EQ(report.final_params.size(), p.size());
  for (size_t j = 0; j < p.size(); ++j) {
    EXPECT_NEAR(report.final_params[j], p[j], 1e-5) << "parameter " << j;
  }
  // The losses printed per epoch fall.
  EXPECT_LT(report.epochs[2].train_loss, report.epochs[0].train_loss);
  EXPECT_FALSE(report.worker0_stats_json.empty());
}

INSTANTIATE_TEST_SUITE_P(Shapes, TrainSoftmaxExactTest,
                         ::testing::Values(ClusterShape{1, 1, 1}, ClusterShape{2, 1, 1},
                                           ClusterShape{3, 2, 2}),
                         [](const ::testing::TestParamInfo<ClusterShape>& info) {
                           return std::to_string(info.param.workers) + "workers_" +
                                  std::to_string(info.param.shards) + "shards_" +
                                  std::to_string(info.param.channels) + "channels";
                         });

// The folder of the real data set (FMNIST_DATA_DIR or the Debian package's),
// and in *missing the first file it lacks ("" when complete).
std::string FashionMnistDir(std::string* missing) {
  const char* env = std::getenv("FMNIST_DATA_DIR");
  const std::string dir = env != nullptr ? env : "/usr/share/datasets/fashion-mnist";
  missing->clear();
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    if (!fs::exists(dir + "/" + f)) {
      *missing = dir + "/" + f;
      break;
    }
  }
  return dir;
}

#define SKIP_WITHOUT_FASHION_MNIST(missing)                  \
  if (!(missing).empty())                                    \
  GTEST_SKIP() << "Fashion-MNIST not found: " << (missing)   \
               << " is missing (install the Debian package " \
                  "dataset-fashion-mnist or set FMNIST_DATA_DIR)"

// End to end on a subset of the real data set.
TEST(TrainSoftmaxTest, LossFallsOnRealFashionMnistSubset) {
  std::string missing;
  const std::string dir = FashionMnistDir(&missing);
  SKIP_WITHOUT_FASHION_MNIST(missing);
  Dataset train, test;
  geeps::Status s = LoadFashionMnist(dir, 2000, &train, &test);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(train.size(), 2000);
  ASSERT_EQ(test.size(), 10000);

  TrainOptions o;  // the binary's defaults, on 2 workers
  o.workers = 2;
  o.epochs = 2;
  TrainReport report;
  s = TrainSoftmax(o, train, test, &report);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(report.epochs.size(), 2u);
  EXPECT_NEAR(report.initial_test.loss, std::log(10.0), 0.1);
  EXPECT_LT(report.epochs[0].train_loss, 0.9 * std::log(10.0));
  EXPECT_LT(report.epochs[1].train_loss, report.epochs[0].train_loss);
  EXPECT_LT(report.epochs[1].test.loss, 0.5 * report.initial_test.loss);
  EXPECT_GT(report.epochs[1].test.accuracy, 0.70);
  for (const EpochReport& e : report.epochs) {
    std::cout << "epoch " << e.epoch << ": train loss " << e.train_loss << ", test loss "
              << e.test.loss << ", test accuracy " << e.test.accuracy << ", "
              << e.samples_per_second << " samples/s\n";
  }
}

// ---- softmax_fmnist --processes -----------------------------------------

// The value after "final test accuracy: " in `log`, or -1.
double FinalAccuracy(const std::string& log) {
  const std::string key = "final test accuracy: ";
  const size_t at = log.find(key);
  if (at == std::string::npos) return -1;
  return std::strtod(log.c_str() + at + key.size(), nullptr);
}

// Two processes of the binary, as geeps_launch would start them, train on a
// subset: the process of worker 0 prints the accuracy, which matches an
// embedded 2-worker run (the same shards and steps under BSP; only the order
// in which the servers add the two workers' deltas may differ).
TEST(ProcessModeTest, TwoProcessesTrainLikeTheEmbeddedCluster) {
#ifndef FMNIST_TRAINER
  GTEST_SKIP() << "softmax_fmnist is not built (FMNIST_TRAINER undefined)";
#else
  std::string missing;
  const std::string dir = FashionMnistDir(&missing);
  SKIP_WITHOUT_FASHION_MNIST(missing);
  TempDir tmp;
  const std::string coordinator = "127.0.0.1:" + std::to_string(geeps::testing::FreePort());
  std::vector<geeps::testing::Child> children;
  for (int rank = 0; rank < 2; ++rank) {
    children.push_back(
        geeps::testing::Spawn({::geeps::testing::Program(FMNIST_TRAINER), "--processes",
                               "--train-limit", "2000", "--epochs", "1", "--data-dir", dir},
                              {{"GEEPS_RANK", std::to_string(rank)},
                               {"GEEPS_WORLD_SIZE", "2"},
                               {"GEEPS_COORDINATOR", coordinator}},
                              tmp.File("rank" + std::to_string(rank) + ".log")));
    ASSERT_GT(children.back().pid, 0)
        << "cannot start " << ::geeps::testing::Program(FMNIST_TRAINER);
  }
  const auto start = std::chrono::steady_clock::now();
  geeps::testing::WaitAll(children, std::chrono::seconds(60));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string log0 = geeps::testing::ReadFile(children[0].log);
  const std::string log1 = geeps::testing::ReadFile(children[1].log);
  const std::string logs = "---- rank 0 (status " + std::to_string(children[0].status) + ")\n" +
                           log0 + "---- rank 1 (status " + std::to_string(children[1].status) +
                           ")\n" + log1;
  ASSERT_EQ(children[0].status, 0) << logs;
  ASSERT_EQ(children[1].status, 0) << logs;
  EXPECT_NE(log0.find("worker 0 train loss"), std::string::npos) << logs;
  EXPECT_NE(log1.find("rank 1: worker 1 done"), std::string::npos) << logs;
  EXPECT_EQ(log1.find("final test accuracy"), std::string::npos) << logs;
  const double accuracy = FinalAccuracy(log0);
  EXPECT_GT(accuracy, 0.6) << logs;

  Dataset train, test;
  geeps::Status s = LoadFashionMnist(dir, 2000, &train, &test);
  ASSERT_TRUE(s.ok()) << s;
  TrainOptions o;  // the binary's defaults
  o.workers = 2;
  o.epochs = 1;
  TrainReport report;
  s = TrainSoftmax(o, train, test, &report);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(report.epochs.size(), 1u);
  EXPECT_NEAR(accuracy, report.epochs[0].test.accuracy, 0.01) << logs;
  std::cout << "2 processes: final test accuracy " << accuracy << " in " << seconds
            << " s; embedded 2 workers: " << report.epochs[0].test.accuracy << "\n";
#endif
}

}  // namespace
}  // namespace fmnist
