#include "transport/routing_id.h"

#include <cctype>
#include <cstdio>
#include <random>

namespace geeps::transport {
namespace {

// The value of s[begin, end), a number in canonical decimal (digits only, no
// leading zero) of 1 to 9 digits (so no overflow), or -1.
int CanonicalDecimal(const char* s, size_t begin, size_t end) {
  if (end <= begin || end - begin > 9) return -1;
  if (s[begin] == '0' && end - begin > 1) return -1;
  int v = 0;
  for (size_t i = begin; i < end; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

}  // namespace

std::string WorkerRoutingId(int rank) { return "w" + std::to_string(rank); }

int ParseWorkerRoutingId(const void* data, size_t size, int num_workers) {
  const char* s = static_cast<const char*>(data);
  if (size < 2 || size > 11 || s[0] != 'w') return -1;
  long long v = 0;
  for (size_t i = 1; i < size; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    if (i == 1 && s[i] == '0' && size > 2) return -1;  // no leading zeros
    v = v * 10 + (s[i] - '0');
  }
  return v < num_workers ? static_cast<int>(v) : -1;
}

std::string PeerRoutingId(int rank, uint64_t nonce) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(nonce));
  return "r" + std::to_string(rank) + "." + hex;
}

std::string NewPeerRoutingId(int rank) {
  std::random_device random;
  const uint64_t nonce = (uint64_t{random()} << 32) | uint64_t{random()};
  return PeerRoutingId(rank, nonce);
}

std::string NewJobToken() {
  std::random_device random;
  std::string token;
  static const char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = random();
    for (int k = 0; k < 8; ++k) token += kHex[(word >> (4 * k)) & 0xf];
  }
  return token;
}

bool ValidJobToken(const std::string& token) {
  if (token.size() != 32) return false;
  for (char c : token)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

int ParsePeerRoutingId(const std::string& s) {
  const size_t dot = s.find('.');
  if (s.size() < 4 || s.size() > 40 || s[0] != 'r' || dot == std::string::npos || dot < 2 ||
      dot > 8 || dot + 1 == s.size())
    return -1;
  for (size_t i = dot + 1; i < s.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return -1;
  return CanonicalDecimal(s.data(), 1, dot);
}

}  // namespace geeps::transport
