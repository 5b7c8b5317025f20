// The root service's session: hellos, rounds, deadlines and the failure every rank hears
// about (NOTE [bootstrap protocol], NOTE [bootstrap deadlines] in socket_util.h).
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/root_service.h"
#include "bootstrap/sha256.h"
#include "bootstrap/socket_util.h"
#include "base/error.h"

namespace tpar {
namespace bootstrap_detail {
namespace {

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 16) {
      s += ", ... (" + std::to_string(ranks.size()) + " in all)";
      break;
    }
    if (i > 0) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace

void RootService::checkDeadlines() {
  int64_t now = nowMs();
  if (failing_) {
    if (now >= flushDeadline_) done_ = true;
    return;
  }
  // A connection that has not proved itself in time is dropped; the session goes on.
  for (auto& peer : peers_) {
    if (peer->fd >= 0 && !peer->proved && now >= peer->authDeadline) dropUnproved(peer.get());
  }
  if (nranks_ == 0) {
    if (now >= idleDeadline_) {
      fail(tparTimeout, tparTimeout,
           "no rank connected within %lld ms of createUniqueId; the service ended",
           static_cast<long long>(idleTimeoutMs_));
    }
  } else if (!started_) {
    if (now >= helloDeadline_) {
      std::vector<int> missing, present;
      for (int r = 0; r < nranks_; ++r) (rankState_[r] == kFree ? missing : present).push_back(r);
      fail(tparTimeout, tparTimeout,
           "rank(s) %s of %d did not connect within %lld ms (connected: %s)",
           rankList(missing).c_str(), nranks_, static_cast<long long>(deadlineTimeoutMs_),
           rankList(present).c_str());
    }
  } else if (postedCount_ > 0 && now >= roundDeadline_) {
    std::vector<int> missing;
    for (int r = 0; r < nranks_; ++r) {
      if (!posted_[r]) missing.push_back(r);
    }
    fail(tparTimeout, tparRemoteError,
         "%s round %llu: rank(s) %s of %d did not arrive within %lld ms", kindName(roundKind_),
         static_cast<unsigned long long>(round_), rankList(missing).c_str(), nranks_,
         static_cast<long long>(deadlineTimeoutMs_));
  }
}

void RootService::onHello(Peer* peer) {
  const Request& h = peer->header;
  const Mac expected = helloMac(id_, peer->nonce, h);
  if (!constantTimeEqual(expected.data(), h.mac, kMacBytes)) {
    reject(peer, tparInvalidUsage,
           "the hello does not prove knowledge of the uniqueId's secret (an id from another "
           "session, or not a tpar rank)");
    return;
  }
  peer->proved = true;
  peer->authDeadline = kNoDeadline;
  if (h.nranks < 1 || h.nranks > kMaxRanks || h.rank < 0 || h.rank >= h.nranks ||
      h.timeoutMs <= 0) {
    reject(peer, tparInvalidArgument, "invalid hello (rank %d, nranks %d)", h.rank, h.nranks);
    return;
  }
  if (nranks_ == 0) {
    nranks_ = h.nranks;
    firstRank_ = h.rank;
    rankState_.assign(nranks_, kFree);
    posted_.assign(nranks_, false);
    blobs_.assign(nranks_, {});
    byRank_.assign(nranks_, nullptr);
  }
  if (h.nranks != nranks_) {
    fail(tparInvalidUsage, tparInvalidUsage,
         "ranks disagree on nranks: rank %d passed nranks=%d but rank %d passed "
         "nranks=%d",
         h.rank, h.nranks, firstRank_, nranks_);
    return;
  }
  if (rankState_[h.rank] != kFree) {
    const Peer* first = byRank_[h.rank];
    fail(tparInvalidUsage, tparInvalidUsage,
         "duplicate rank: two ranks claim rank %d of %d (pid %d%s, then pid %d)", h.rank,
         nranks_, first != nullptr ? first->cred.pid : 0,
         started_ ? ", in the group that had formed" : "", peer->cred.pid);
    return;
  }
  peer->rank = h.rank;
  peer->timeoutMs = h.timeoutMs;
  rankState_[h.rank] = kPresent;
  byRank_[h.rank] = peer;
  // Our proof goes out before anything else the rank will read (NOTE [bootstrap protocol]).
  const Mac proof = serviceMac(id_, peer->nonce, h);
  queue(peer, replyBytes(tparSuccess, reinterpret_cast<const char*>(proof.data()), kMacBytes));
  extendDeadline(&helloDeadline_, peer->timeoutMs);
  if (++helloCount_ < nranks_) return;
  started_ = true;
  Bytes goAhead = replyBytes(tparSuccess, nullptr, 0);
  for (Peer* p : byRank_) queue(p, goAhead);
}

void RootService::onRound(Peer* peer) {
  const Request& h = peer->header;
  int rank = peer->rank;
  if (!started_ || posted_[rank]) {
    fail(tparInternalError, tparInternalError, "rank %d sent a request out of turn (round %llu)",
         rank, static_cast<unsigned long long>(round_));
    return;
  }
  if (postedCount_ == 0) {
    roundKind_ = h.kind;
    roundBytes_ = h.bytes;
    roundFirstRank_ = rank;
  } else if (h.kind != roundKind_) {
    fail(tparInvalidUsage, tparInvalidUsage,
         "round %llu: rank %d called %s but rank %d called %s",
         static_cast<unsigned long long>(round_), rank, kindName(h.kind), roundFirstRank_,
         kindName(roundKind_));
    return;
  } else if (h.bytes != roundBytes_) {
    fail(tparInvalidUsage, tparInvalidUsage,
         "allGather round %llu: ranks passed different sizes: rank %d passed %llu "
         "bytes but rank %d passed %llu bytes",
         static_cast<unsigned long long>(round_), rank, static_cast<unsigned long long>(h.bytes),
         roundFirstRank_, static_cast<unsigned long long>(roundBytes_));
    return;
  }
  if (leftCount_ > 0) {
    std::vector<int> left;
    for (int r = 0; r < nranks_; ++r) {
      if (rankState_[r] == kLeft) left.push_back(r);
    }
    fail(tparRemoteError, tparRemoteError,
         "%s round %llu cannot complete: rank(s) %s already closed their connection",
         kindName(h.kind), static_cast<unsigned long long>(round_), rankList(left).c_str());
    return;
  }
  blobs_[rank] = std::move(peer->payload);
  peer->payload = {};
  posted_[rank] = true;
  if (postedCount_++ == 0) roundDeadline_ = kNoDeadline;
  extendDeadline(&roundDeadline_, peer->timeoutMs);
  if (postedCount_ < nranks_) return;

  // One shared copy of the concatenation serves every rank's reply.
  auto all = std::make_shared<std::vector<char>>(sizeof(Reply) + roundBytes_ * nranks_);
  Reply reply = {kWireMagic, tparSuccess, roundBytes_ * nranks_};
  memcpy(all->data(), &reply, sizeof(reply));
  for (int r = 0; r < nranks_; ++r) {
    if (roundBytes_ > 0) {
      memcpy(all->data() + sizeof(Reply) + r * roundBytes_, blobs_[r].data(), roundBytes_);
    }
    blobs_[r] = {};
    posted_[r] = false;
  }
  postedCount_ = 0;
  ++round_;
  for (Peer* p : byRank_) queue(p, all);
}

void RootService::onDisconnect(Peer* peer) {
  int rank = peer->rank;  // -1: never a rank, nothing of the session depends on it
  closePeer(peer);
  if (rank < 0 || failing_) return;
  byRank_[rank] = nullptr;
  rankState_[rank] = kLeft;
  ++leftCount_;
  if (!started_) {
    fail(tparRemoteError, tparRemoteError,
         "rank %d closed its connection before all %d ranks connected", rank, nranks_);
  } else if (postedCount_ > 0) {
    fail(tparRemoteError, tparRemoteError,
         "rank(s) %d closed their connection during %s round %llu", rank, kindName(roundKind_),
         static_cast<unsigned long long>(round_));
  } else if (leftCount_ == nranks_) {
    done_ = true;  // the normal end: every rank is finished with the bootstrap
  }
}

void RootService::extendDeadline(int64_t* deadline, int64_t timeoutMs) {
  int64_t candidate = deadlineAfter(nowMs(), timeoutMs);
  if (candidate < *deadline) {
    *deadline = candidate;
    deadlineTimeoutMs_ = timeoutMs;
  }
}

void RootService::fail(tparResult_t waitingCode, tparResult_t otherCode, const char* fmt, ...) {
  if (failing_) return;  // the first failure is the one every rank hears about
  char text[kMaxErrorText];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  failing_ = true;
  flushDeadline_ = nowMs() + kFlushMs;
  // A rank arriving from now on is refused at once instead of waiting in the backlog.
  close(listenFd_);
  listenFd_ = -1;
  size_t size = strlen(text);
  Bytes waiting = replyBytes(waitingCode, text, size);
  Bytes other = replyBytes(otherCode, text, size);
  for (auto& peer : peers_) {
    if (peer->fd < 0 || peer->rejected) continue;
    if (!peer->proved) {
      closePeer(peer.get());  // a stranger is owed no explanation of the session
      continue;
    }
    bool isWaiting = !started_ || (peer->rank >= 0 && posted_[peer->rank]);
    queue(peer.get(), isWaiting ? waiting : other);
  }
}

}  // namespace bootstrap_detail
}  // namespace tpar
