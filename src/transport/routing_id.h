// The routing ids of the project's sockets, the one codec for them: what a
// DEALER sets as ZMQ_ROUTING_ID and what a ROUTER reads as the first frame
// of every message it receives. Parsing is strict (canonical decimal, no
// leading zeros, bounded length): a ROUTER's first frame comes from anyone
// who can connect.
//
// Nothing here needs ZeroMQ.
#ifndef GEEPS_TRANSPORT_ROUTING_ID_H_
#define GEEPS_TRANSPORT_ROUTING_ID_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace geeps::transport {

// ---- Data plane: a worker's DEALERs at the shard partitions' ROUTERs ------
// "w" followed by the decimal rank.
std::string WorkerRoutingId(int rank);
// The worker rank a routing id names; -1 when it is not a worker id below
// num_workers.
int ParseWorkerRoutingId(const void* data, size_t size, int num_workers);

// ---- Control plane: a rank's DEALER at the coordinator's ROUTER -----------
// "r<rank>.<nonce>", the nonce 16 hexadecimal digits, so that two processes
// that claim one rank are told apart (ZeroMQ would drop the second one's
// messages).
std::string PeerRoutingId(int rank, uint64_t nonce);
// PeerRoutingId(rank, a random nonce).
std::string NewPeerRoutingId(int rank);
// The rank a peer routing id claims (any rank of up to 7 digits: the caller
// checks it against the world size), or -1 when it is not one (at most 40
// characters).
int ParsePeerRoutingId(const std::string& id);

// ---- The job token ---------------------------------------------------------
// Without CURVE keys, what a data-plane connection presents to be admitted
// (security.h): made by rank 0 at the rendezvous, sent in WELCOME. 32
// lowercase hexadecimal digits from std::random_device (128 bits).
std::string NewJobToken();
// Whether `token` is one.
bool ValidJobToken(const std::string& token);

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_ROUTING_ID_H_
