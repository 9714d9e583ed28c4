#include "transport/fingerprint.h"

namespace geeps::transport {

std::string FingerprintText(const Config& c, FingerprintScope scope) {
  const bool checkpoint = scope == FingerprintScope::kCheckpoint;
  std::string s;
  if (checkpoint) {
    s += "workers=" + std::to_string(c.num_workers) + ";shards=" + std::to_string(c.num_shards) +
         ";";
  }
  s += "channels=" + std::to_string(c.num_channels);
  if (checkpoint) s += ";slack=" + std::to_string(c.default_slack);
  s += c.deterministic_bsp ? ";deterministic" : ";plain";
  if (!checkpoint && !c.resend_after_connection_loss) s += ";noresend";
  if (!checkpoint && c.aggregate_per_machine)
    s += ";aggregate=" + std::to_string(c.workers_per_machine);
  // Sizes and counts every rank must share (messages cut at one size are
  // received with the same cap; a checkpoint is complete only when every
  // partition writes at the same clocks): listed when not the default, so
  // that the texts of jobs that leave them alone stay as they were.
  const Config defaults;
  if (!checkpoint && c.pipeline_part_bytes != defaults.pipeline_part_bytes)
    s += ";pipeline=" + std::to_string(c.pipeline_part_bytes);
  if (!checkpoint && c.pack_below_bytes != defaults.pack_below_bytes)
    s += ";pack=" + std::to_string(c.pack_below_bytes);
  if (!checkpoint && c.max_message_bytes != defaults.max_message_bytes)
    s += ";maxmsg=" + std::to_string(c.max_message_bytes);
  if (!checkpoint && c.checkpoint_every != defaults.checkpoint_every)
    s += ";ckpt_every=" + std::to_string(c.checkpoint_every);

  for (const TableSpec& t : c.tables) {
    s += ";" + std::to_string(t.name.size()) + ":" + t.name + "," + std::to_string(t.num_rows) +
         "," + std::to_string(t.row_width) + "," + (t.local ? "l" : "s");
  }
  return s;
}

uint64_t FingerprintHash(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;  // not FNV's basis: see the header
  for (unsigned char ch : bytes) h = (h ^ ch) * 1099511628211ull;
  return h;
}

uint64_t JobFingerprint(const Config& config, FingerprintScope scope) {
  return FingerprintHash(FingerprintText(config, scope));
}

}  // namespace geeps::transport
