#include <sstream>

#include "geeps/stats.h"

namespace geeps {
namespace {

// A string's characters as inside a JSON string literal.
std::string JsonEscape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += ' ';
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

std::string DataPathBytes::ToJson() const {
  std::ostringstream o;
  o << "{\"gather\":" << gather << ",\"zero\":" << zero << ",\"scatter_add\":" << scatter_add
    << ",\"to_slot\":" << to_slot << ",\"pack\":" << pack << ",\"install\":" << install
    << ",\"app_copies\":" << app_copies << "}";
  return o.str();
}

std::string WorkerStats::ToJson() const {
  std::ostringstream o;
  o << "{\"rank\":" << rank << ",\"clock\":" << clock << ",\"iterations\":" << iterations
    << ",\"read_wait_seconds\":" << read_wait_seconds << ",\"reads_waited\":" << reads_waited
    << ",\"waits_spun\":" << waits_spun << ",\"waits_ended_spinning\":" << waits_ended_spinning
    << ",\"messages_sent\":" << messages_sent << ",\"messages_received\":" << messages_received
    << ",\"bytes_sent\":" << bytes_sent << ",\"bytes_received\":" << bytes_received
    << ",\"pushes_installed\":" << pushes_installed
    << ",\"pushes_installed_by_app\":" << pushes_installed_by_app
    << ",\"pushes_adopted\":" << pushes_adopted << ",\"updates_direct\":" << updates_direct
    << ",\"reads_in_place\":" << reads_in_place << ",\"frames_dropped\":" << frames_dropped
    << ",\"connection_losses\":" << connection_losses << ",\"reconnects\":" << reconnects
    << ",\"updates_resent\":" << updates_resent << ",\"pushes_repeated\":" << pushes_repeated
    << ",\"data_path_bytes\":" << data_path.ToJson() << ",\"device\":\"" << JsonEscape(device)
    << "\""
    << ",\"device_bytes_in_use\":" << device_bytes_in_use
    << ",\"memory_stall_seconds\":" << memory_stall_seconds
    << ",\"bytes_host_to_device\":" << bytes_host_to_device
    << ",\"bytes_device_to_host\":" << bytes_device_to_host << ",\"pool_bytes\":" << pool_bytes
    << ",\"pool_high_water\":" << pool_high_water << ",\"memory_stall_by_access\":"
    << (memory_stall_by_access_json.empty() ? "{}" : memory_stall_by_access_json)
    << ",\"memory_plan\":" << (memory_plan_json.empty() ? "null" : memory_plan_json) << "}";
  return o.str();
}

void ShardStats::Add(const ShardStats& o) {
  updates_applied += o.updates_applied;
  rows_applied += o.rows_applied;
  pushes_sent += o.pushes_sent;
  bytes_received += o.bytes_received;
  bytes_sent += o.bytes_sent;
  frames_dropped += o.frames_dropped;
  apply_bytes += o.apply_bytes;
  fold_bytes += o.fold_bytes;
  push_copy_bytes += o.push_copy_bytes;
  push_zero_copy_bytes += o.push_zero_copy_bytes;
  early_push_parts += o.early_push_parts;
  repeated_rows_skipped += o.repeated_rows_skipped;
  connections_closed += o.connections_closed;
  routing_id_handovers += o.routing_id_handovers;
  resyncs_received += o.resyncs_received;
  repushes += o.repushes;
  pushes_deferred += o.pushes_deferred;
}

std::string RelayStats::ToJson() const {
  std::ostringstream o;
  o << "{\"machine\":" << machine << ",\"updates_up\":" << updates_up
    << ",\"pushes_shared\":" << pushes_shared << ",\"frames_dropped\":" << frames_dropped
    << ",\"connection_losses\":" << connection_losses << ",\"updates_resent\":" << updates_resent
    << "}";
  return o.str();
}

std::string ShardStats::ToJson() const {
  std::ostringstream o;
  o << "{\"shard\":" << shard << ",\"updates_applied\":" << updates_applied
    << ",\"rows_applied\":" << rows_applied << ",\"pushes_sent\":" << pushes_sent
    << ",\"bytes_received\":" << bytes_received << ",\"bytes_sent\":" << bytes_sent
    << ",\"frames_dropped\":" << frames_dropped << ",\"apply_bytes\":" << apply_bytes
    << ",\"fold_bytes\":" << fold_bytes << ",\"push_copy_bytes\":" << push_copy_bytes
    << ",\"push_zero_copy_bytes\":" << push_zero_copy_bytes
    << ",\"early_push_parts\":" << early_push_parts
    << ",\"repeated_rows_skipped\":" << repeated_rows_skipped
    << ",\"connections_closed\":" << connections_closed
    << ",\"routing_id_handovers\":" << routing_id_handovers
    << ",\"resyncs_received\":" << resyncs_received << ",\"repushes\":" << repushes
    << ",\"pushes_deferred\":" << pushes_deferred << "}";
  return o.str();
}

}  // namespace geeps
