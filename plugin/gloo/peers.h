// Which rank is behind an address in Gloo's messages. Gloo names a failed connection by the
// peer's socket address ("Connection closed by peer [127.0.0.1]:33708"); users need the rank.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dlpg_gloo {

class MeshContext;

// After connectFullMesh: the peer address of every connected pair as Gloo prints it
// ("[ip]:port"), with its rank. Finds each pair's socket among this process's descriptors
// by its local address. Best effort: pairs not found are left out.
std::vector<std::pair<std::string, int>> peer_addresses(MeshContext &ctx);

// text with a leading explanation naming the rank of the first known address it holds,
// when it reports a lost connection; else text unchanged.
std::string name_peer(const std::vector<std::pair<std::string, int>> &peers,
                      const std::string &text);

}  // namespace dlpg_gloo
