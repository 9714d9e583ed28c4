// geeps_keygen: writes a new CURVE job key file for a multi-process job
// (docs/security.md).
//
//   geeps_keygen [--force] <path>
//
// The file (mode 0600) holds one key pair in Z85; give the same file to every
// process of the job with GEEPS_CURVE_KEYS=<path> (or
// ProcessOptions::curve_key_file). An existing file is kept unless --force.
// Exit codes: 0 written, 1 error, 2 usage.
#include <cstdio>
#include <cstring>
#include <string>

#include "geeps/process.h"

namespace {

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: geeps_keygen [--force] <path>\n"
               "Writes a new CURVE job key file (mode 0600) for GEEPS_CURVE_KEYS.\n"
               "  --force  replace <path> if it exists\n");
}

}  // namespace

int main(int argc, char** argv) {
  bool force = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      Usage(stdout);
      return 0;
    }
    if (arg == "--force" || arg == "-f") {
      force = true;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "geeps_keygen: unknown option %s\n", arg.c_str());
      Usage(stderr);
      return 2;
    } else if (path.empty()) {
      path = arg;
    } else {
      std::fprintf(stderr, "geeps_keygen: more than one path\n");
      Usage(stderr);
      return 2;
    }
  }
  if (path.empty()) {
    Usage(stderr);
    return 2;
  }
  const geeps::StatusOr<std::string> public_key = geeps::WriteNewCurveKeyFile(path, force);
  if (!public_key.ok()) {
    const geeps::Status& st = public_key.status();
    std::fprintf(stderr, "geeps_keygen: %s%s\n", st.message().c_str(),
                 st.code() == geeps::StatusCode::kFailedPrecondition && !force
                     ? " (pass --force to replace it)"
                     : "");
    return 1;
  }
  std::printf("geeps_keygen: wrote a new CURVE job key to %s (mode 0600); public key %s\n",
              path.c_str(), public_key->c_str());
  return 0;
}
