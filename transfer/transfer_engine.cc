// TransferEngine: its lanes (transfer/engine_lane.h), the striping of a grant or send over them,
// the coordinator that completes a striped operation, and the public API.
#include "transfer/transfer_engine.h"

#include <sys/random.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "transfer/engine_core.h"
#include "transfer/engine_lane.h"

namespace kvmesh {

namespace {

constexpr std::uint32_t kMaxLanes = 16;

// A multi-lane engine's address: the magic, the lane count (u32 LE), then per lane its worker
// address's length (u32 LE) and bytes. A single-lane engine's address is its worker's, as is.
constexpr char kLanesMagic[8] = {'K', 'V', 'M', 'L', 'A', 'N', 'E', 'S'};

void PutU32(WorkerAddress* out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<std::byte>(v >> (8 * i)));
}

std::uint32_t GetU32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

WorkerAddress PackLanes(const std::vector<WorkerAddress>& lanes) {
  WorkerAddress out;
  for (char c : kLanesMagic) out.push_back(static_cast<std::byte>(c));
  PutU32(&out, static_cast<std::uint32_t>(lanes.size()));
  for (const WorkerAddress& a : lanes) {
    PutU32(&out, static_cast<std::uint32_t>(a.size()));
    out.insert(out.end(), a.begin(), a.end());
  }
  return out;
}

// The lanes' worker addresses in `address`: the address itself when it is not a lane list (no
// magic). kInvalidArgument: the magic, then no well-formed lane list — never handed to UCX, which
// aborts the process on an address it cannot parse.
Result<std::vector<WorkerAddress>> UnpackLanes(const WorkerAddress& address) {
  const std::size_t n = address.size();
  if (n < sizeof(kLanesMagic) ||
      std::memcmp(address.data(), kLanesMagic, sizeof(kLanesMagic)) != 0) {
    return std::vector<WorkerAddress>{address};
  }
  const auto malformed = [n] {
    return Status::InvalidArgument("malformed lane list address (" + std::to_string(n) + " bytes)");
  };
  std::size_t at = sizeof(kLanesMagic);
  if (n - at < 4) return malformed();
  const std::uint32_t count = GetU32(address.data() + at);
  at += 4;
  if (count == 0 || count > kMaxLanes) return malformed();
  std::vector<WorkerAddress> out;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (n - at < 4) return malformed();
    const std::uint32_t len = GetU32(address.data() + at);
    at += 4;
    if (len == 0 || n - at < len) return malformed();
    out.emplace_back(address.begin() + static_cast<std::ptrdiff_t>(at),
                     address.begin() + static_cast<std::ptrdiff_t>(at + len));
    at += len;
  }
  if (at != n) return malformed();
  return out;
}

// Slice g of a grant striped over `lanes` lanes: row g / lanes, and within a row the lanes rotate
// by the row, so that a stride of slices (a block's header, bytes and checksum) does not keep
// landing on one lane. Lane k's slices are rows 0, 1, ... of its own grant, in order.
std::uint32_t LaneOf(std::uint64_t g, std::uint32_t lanes) {
  return static_cast<std::uint32_t>((g % lanes + g / lanes) % lanes);
}
std::uint64_t GlobalSlice(std::uint64_t row, std::uint32_t lane, std::uint32_t lanes) {
  return row * lanes + (lane + lanes - row % lanes) % lanes;
}

Status ValidateOptions(const TransferEngineOptions& options) {
  if (options.max_grants == 0 || options.max_slices_per_operation == 0 ||
      options.send_window_slices == 0 || options.send_window_bytes == 0) {
    return Status::InvalidArgument(
        "max_grants, max_slices_per_operation, send_window_slices and send_window_bytes must be "
        "positive");
  }
  if (options.idle_tick.count() <= 0) return Status::InvalidArgument("idle_tick must be positive");
  if (options.busy_poll.count() < 0) return Status::InvalidArgument("busy_poll is negative");
  if (options.lanes == 0 || options.lanes > kMaxLanes) {
    return Status::InvalidArgument("lanes " + std::to_string(options.lanes) + " is not in 1.." +
                                   std::to_string(kMaxLanes));
  }
  return Status::Ok();
}

TransferStats& operator+=(TransferStats& a, const TransferStats& b) {
  a.grants_started += b.grants_started;
  a.grants_completed += b.grants_completed;
  a.grants_failed += b.grants_failed;
  a.sends_started += b.sends_started;
  a.sends_completed += b.sends_completed;
  a.sends_failed += b.sends_failed;
  a.slices_received += b.slices_received;
  a.bytes_received += b.bytes_received;
  a.slices_sent += b.slices_sent;
  a.bytes_sent += b.bytes_sent;
  a.slices_receiving += b.slices_receiving;
  a.rejected_malformed += b.rejected_malformed;
  a.rejected_unknown_peer += b.rejected_unknown_peer;
  a.rejected_unknown_transfer += b.rejected_unknown_transfer;
  a.rejected_wrong_peer += b.rejected_wrong_peer;
  a.rejected_bad_slice += b.rejected_bad_slice;
  a.rejected_closed += b.rejected_closed;
  a.unknown_done += b.unknown_done;
  a.peer_failures += b.peer_failures;
  a.forced_closes += b.forced_closes;
  return a;
}

// A multi-lane engine's grant id: 60 random bits, and in the low 4 the number of lanes the grant
// is striped over, less one — which the sender reads to stripe its sends the same way.
constexpr std::uint64_t kWidthBits = 0xF;

TransferId NewStripedId(std::uint32_t width) {
  while (true) {
    std::uint64_t value = 0;
    if (getrandom(&value, sizeof(value), 0) != static_cast<ssize_t>(sizeof(value))) continue;
    value = (value & ~kWidthBits) | (width - 1);
    if (value != 0) return TransferId{value};
  }
}

std::uint32_t WidthOf(TransferId id) {
  return static_cast<std::uint32_t>(id.value & kWidthBits) + 1;
}

}  // namespace

// The engine: its lanes, and for more than one the coordinator thread that completes a striped
// grant or send once each lane's part has (and cancels a grant's other parts when one fails).
class TransferEngine::Impl {
 public:
  explicit Impl(const TransferEngineOptions& options) : options_(options) {}
  ~Impl() { Stop(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  Status Start() {
    for (std::uint32_t i = 0; i < options_.lanes; ++i) {
      lanes_.push_back(std::make_unique<internal::EngineLane>(options_));
      KVMESH_RETURN_IF_ERROR(lanes_.back()->Start());
    }
    if (options_.lanes == 1) {
      address_ = lanes_[0]->address();
      return Status::Ok();
    }
    std::vector<WorkerAddress> each;
    for (const auto& lane : lanes_) each.push_back(lane->address());
    address_ = PackLanes(each);
    coordinator_ = std::thread([this] { Coordinate(); });
    return Status::Ok();
  }

  [[nodiscard]] const WorkerAddress& address() const { return address_; }

  Status Connect(PeerId peer, const WorkerAddress& address) {
    KVMESH_ASSIGN_OR_RETURN(const std::vector<WorkerAddress> theirs, UnpackLanes(address));
    if (lanes_.size() == 1) {  // a peer with lanes is reached on its lane 0
      return OnLane(0, [&](auto& core) { return core.Connect(peer, theirs[0]); });
    }
    const auto used = static_cast<std::uint32_t>(std::min(lanes_.size(), theirs.size()));
    {
      MutexLock lock(&mu_);
      peer_lanes_.erase(peer);  // until every lane is connected: single-lane, or failing
    }
    Status status = Status::Ok();
    for (std::uint32_t k = 0; k < lanes_.size(); ++k) {
      if (k < used) {
        Status st = OnLane(k, [&](auto& core) { return core.Connect(peer, theirs[k]); });
        if (!st.ok() && status.ok()) status = st.WithContext("lane " + std::to_string(k));
      } else {  // a lane the peer does not have
        OnLane(k, [&](auto& core) { return core.Disconnect(peer); }).IgnoreError();
      }
    }
    if (status.ok()) {
      MutexLock lock(&mu_);
      peer_lanes_[peer] = used;
    }
    return status;
  }

  Status Disconnect(PeerId peer) {
    if (lanes_.size() == 1) return OnLane(0, [&](auto& core) { return core.Disconnect(peer); });
    {
      MutexLock lock(&mu_);
      peer_lanes_.erase(peer);
    }
    bool any = false;
    Status failed = Status::Ok();
    for (std::uint32_t k = 0; k < lanes_.size(); ++k) {
      Status st = OnLane(k, [&](auto& core) { return core.Disconnect(peer); });
      if (st.ok()) {
        any = true;
      } else if (st.code() != StatusCode::kNotFound && failed.ok()) {
        failed = st.WithContext("lane " + std::to_string(k));
      }
    }
    if (!failed.ok()) return failed;
    if (any) return Status::Ok();
    return Status::NotFound("peer " + std::to_string(peer.value) + " is not connected");
  }

  Result<RegionId> RegisterRegion(void* base, std::size_t length) {
    KVMESH_ASSIGN_OR_RETURN(
        RegionId first, OnLane(0, [&](auto& core) { return core.RegisterRegion(base, length); }));
    if (lanes_.size() == 1) return first;
    std::vector<RegionId> ids{first};
    for (std::uint32_t k = 1; k < lanes_.size(); ++k) {
      Result<RegionId> id =
          OnLane(k, [&](auto& core) { return core.RegisterRegion(base, length); });
      if (!id.ok()) {
        for (std::uint32_t j = 0; j < ids.size(); ++j) {
          OnLane(j, [&](auto& core) { return core.DeregisterRegion(ids[j]); }).IgnoreError();
        }
        return id.status().WithContext("lane " + std::to_string(k));
      }
      ids.push_back(*id);
    }
    MutexLock lock(&mu_);
    regions_[first.value] = Region{reinterpret_cast<std::uintptr_t>(base), length, std::move(ids)};
    return first;
  }

  // All or nothing: each lane closes the region (refused while a live part uses it there; once
  // closed, no new part may), and only when every lane has it closed is it released on all of
  // them; a refusal reopens it on the lanes that had closed it. So a refused call changes nothing.
  Status DeregisterRegion(RegionId region) {
    if (lanes_.size() == 1) {
      return OnLane(0, [&](auto& core) { return core.DeregisterRegion(region); });
    }
    std::vector<RegionId> ids;
    {
      MutexLock lock(&mu_);
      auto it = regions_.find(region.value);
      if (it == regions_.end()) {
        return Status::NotFound("no region " + std::to_string(region.value));
      }
      if (it->second.closing) {
        return Status::FailedPrecondition("region " + std::to_string(region.value) +
                                          " is being deregistered by another call");
      }
      it->second.closing = true;
      ids = it->second.ids;
    }
    for (std::uint32_t k = 0; k < ids.size(); ++k) {
      Status st = OnLane(k, [&](auto& core) { return core.CloseRegion(ids[k]); });
      if (!st.ok()) {
        for (std::uint32_t j = 0; j < k; ++j) {
          OnLane(j, [&](auto& core) {
            core.ReopenRegion(ids[j]);
            return Status::Ok();
          }).IgnoreError();
        }
        MutexLock lock(&mu_);
        regions_[region.value].closing = false;
        return st.WithContext("lane " + std::to_string(k));
      }
    }
    {
      MutexLock lock(&mu_);
      regions_.erase(region.value);
    }
    for (std::uint32_t k = 0; k < ids.size(); ++k) {
      const Status st = OnLane(k, [&](auto& core) { return core.DeregisterRegion(ids[k]); });
      // Only an engine being destroyed under the call refuses (kCancelled).
      KVMESH_CHECK(st.ok() || st.code() == StatusCode::kCancelled)
          << "lane " << k << ": a closed region was not released: " << st;
    }
    return Status::Ok();
  }

  Result<TransferOp> Grant(const GrantRequest& request) {
    if (lanes_.size() == 1) return OnLane(0, [&](auto& core) { return core.Grant(request); });
    if (request.slices.empty() || request.slices.size() > options_.max_slices_per_operation) {
      return Status::InvalidArgument("a grant needs 1.." +
                                     std::to_string(options_.max_slices_per_operation) +
                                     " slices, got " + std::to_string(request.slices.size()));
    }
    // Striped over as many lanes as the peer shares and the grant has slices: every lane of the
    // stripe then holds a part (row 0), so that whatever the sender sends lands on a lane that
    // knows the grant.
    std::uint64_t bytes = 0;
    for (const Slice& s : request.slices) bytes += s.length;
    const bool small = bytes / request.slices.size() < options_.min_striped_slice_bytes;
    const auto lanes = small ? 1u
                             : static_cast<std::uint32_t>(std::min<std::size_t>(
                                   LanesFor(request.sender), request.slices.size()));
    Stripe stripe;
    if (lanes > 1) {
      KVMESH_RETURN_IF_ERROR(CheckNoOverlap(request.slices));
      KVMESH_ASSIGN_OR_RETURN(stripe, Cut(request.slices, 0, lanes));
    }
    // A new id while one is taken on a lane (a live grant's, or a part still draining there).
    for (int attempt = 1;; ++attempt) {
      const TransferId id = NewStripedId(lanes);
      Result<TransferOp> op = lanes == 1
                                  ? OnLane(0, [&](auto& core) { return core.Grant(request, id); })
                                  : GrantParts(request, lanes, id, stripe.parts);
      if (op.ok() || op.status().code() != StatusCode::kAlreadyExists || attempt == 4) return op;
    }
  }

  Result<TransferOp> GrantParts(const GrantRequest& request, std::uint32_t lanes, TransferId id,
                                const std::vector<std::vector<Slice>>& parts) {
    auto op =
        std::make_shared<internal::TransferOpState>(id, request.on_complete, coordinator_.get_id());
    auto multi = std::make_shared<Multi>(op, request.sender, id, /*grant=*/true, Used(parts));
    grants_started_.fetch_add(1, std::memory_order_relaxed);
    std::vector<TransferOp> made;
    for (std::uint32_t k : multi->lanes) {
      GrantRequest part;
      part.sender = request.sender;
      part.slices = parts[k];
      part.deadline = request.deadline;
      part.on_complete = PartDone(multi);
      if (request.on_slice) {
        part.on_slice = [f = request.on_slice, k, lanes](std::uint32_t row) {
          f(static_cast<std::uint32_t>(GlobalSlice(row, k, lanes)));
        };
      }
      Result<TransferOp> part_op = OnLane(k, [&](auto& core) { return core.Grant(part, id); });
      if (!part_op.ok()) {
        Abandon(*multi, made);
        return part_op.status();
      }
      made.push_back(*part_op);
      parts_started_[0].fetch_add(1, std::memory_order_relaxed);
    }
    return TransferOp(op);
  }

  Status CancelGrant(TransferId transfer) {
    Status status = Status::NotFound("no live grant " + std::to_string(transfer.value));
    for (std::uint32_t k = 0; k < lanes_.size(); ++k) {
      if (OnLane(k, [&](auto& core) { return core.CancelGrant(transfer); }).ok()) {
        status = Status::Ok();
      }
    }
    return status;
  }

  Result<TransferOp> Send(const SendRequest& request) {
    const std::uint32_t shared = LanesFor(request.receiver);
    // A peer without lanes chose the id without a lane count in it: one lane.
    if (shared <= 1 || !request.transfer.valid()) {
      return OnLane(0, [&](auto& core) { return core.Send(request); });
    }
    const std::uint32_t lanes = WidthOf(request.transfer);
    // Wider than the lanes the peer shares: no grant of that peer has this id. Lane 0 sends it and
    // the receiver refuses it as it refuses any transfer it does not know (kNotFound).
    if (lanes == 1 || lanes > shared) {
      return OnLane(0, [&](auto& core) { return core.Send(request); });
    }
    if (request.slices.empty() || request.slices.size() > options_.max_slices_per_operation) {
      return Status::InvalidArgument("a send needs 1.." +
                                     std::to_string(options_.max_slices_per_operation) +
                                     " slices, got " + std::to_string(request.slices.size()));
    }
    KVMESH_ASSIGN_OR_RETURN(const Stripe stripe, Cut(request.slices, request.first_slice, lanes));
    const std::vector<std::vector<Slice>>& parts = stripe.parts;
    const std::vector<std::uint64_t>& first_row = stripe.first_row;
    auto op = std::make_shared<internal::TransferOpState>(request.transfer, request.on_complete,
                                                          coordinator_.get_id());
    auto multi = std::make_shared<Multi>(op, request.receiver, request.transfer, /*grant=*/false,
                                         Used(parts));
    sends_started_.fetch_add(1, std::memory_order_relaxed);
    std::vector<TransferOp> made;
    for (std::uint32_t k : multi->lanes) {
      SendRequest part;
      part.receiver = request.receiver;
      part.transfer = request.transfer;
      part.first_slice = static_cast<std::uint32_t>(first_row[k]);
      part.slices = parts[k];
      part.deadline = request.deadline;
      part.on_complete = PartDone(multi);
      Result<TransferOp> part_op = OnLane(k, [&](auto& core) { return core.Send(part); });
      if (!part_op.ok()) {
        Abandon(*multi, made);
        return part_op.status();
      }
      made.push_back(*part_op);
      parts_started_[1].fetch_add(1, std::memory_order_relaxed);
    }
    return TransferOp(op);
  }

  Status CancelSend(PeerId peer, TransferId transfer) {
    Status status = Status::NotFound("no live send of transfer " + std::to_string(transfer.value) +
                                     " to peer " + std::to_string(peer.value));
    for (std::uint32_t k = 0; k < lanes_.size(); ++k) {
      if (OnLane(k, [&](auto& core) { return core.CancelSend(peer, transfer); }).ok()) {
        status = Status::Ok();
      }
    }
    return status;
  }

  // The lanes' counters summed; a multi-lane grant or send counts once, not once per lane.
  [[nodiscard]] TransferStats stats() const {
    TransferStats s = lanes_[0]->stats();
    if (lanes_.size() == 1) return s;
    for (std::size_t k = 1; k < lanes_.size(); ++k) s += lanes_[k]->stats();
    const auto adjust = [](std::uint64_t& v, std::uint64_t parts, std::uint64_t whole) {
      v = v >= parts ? v - parts + whole : whole;
    };
    const auto ld = [](const std::atomic<std::uint64_t>& v) {
      return v.load(std::memory_order_relaxed);
    };
    adjust(s.grants_started, ld(parts_started_[0]), ld(grants_started_));
    adjust(s.grants_completed, ld(parts_ok_[0]), ld(grants_ok_));
    adjust(s.grants_failed, ld(parts_failed_[0]), ld(grants_failed_));
    adjust(s.sends_started, ld(parts_started_[1]), ld(sends_started_));
    adjust(s.sends_completed, ld(parts_ok_[1]), ld(sends_ok_));
    adjust(s.sends_failed, ld(parts_failed_[1]), ld(sends_failed_));
    return s;
  }

 private:
  // A multi-lane grant or send: one part per lane in `lanes`.
  struct Multi {
    Multi(std::shared_ptr<internal::TransferOpState> op, PeerId peer, TransferId id, bool grant,
          std::vector<std::uint32_t> lanes)
        : op(std::move(op)),
          peer(peer),
          id(id),
          grant(grant),
          lanes(std::move(lanes)),
          remaining(static_cast<std::uint32_t>(this->lanes.size())) {}
    const std::shared_ptr<internal::TransferOpState> op;
    const PeerId peer;
    const TransferId id;
    const bool grant;
    const std::vector<std::uint32_t> lanes;
    Mutex mu;
    std::uint32_t remaining KVMESH_GUARDED_BY(mu);
    Status first_error KVMESH_GUARDED_BY(mu);
    bool abandoned KVMESH_GUARDED_BY(mu) = false;  // never handed to the caller
  };

  // Runs fn(core) on lane k's progress thread. Once the engine is closing (multi-lane), every
  // call fails with kCancelled instead: an on_complete that the close runs may call the engine.
  template <typename Fn>
  auto OnLane(std::uint32_t k, Fn&& fn) -> decltype(std::declval<internal::EngineLane&>().Run(fn)) {
    if (closing_.load(std::memory_order_acquire)) {
      return Status::Cancelled("the transfer engine is closing");
    }
    return lanes_[k]->Run(std::forward<Fn>(fn));
  }

  std::uint32_t LanesFor(PeerId peer) const {
    if (lanes_.size() == 1) return 1;
    MutexLock lock(&mu_);
    auto it = peer_lanes_.find(peer);
    return it == peer_lanes_.end() ? 1 : it->second;
  }

  static std::vector<std::uint32_t> Used(const std::vector<std::vector<Slice>>& parts) {
    std::vector<std::uint32_t> used;
    for (std::uint32_t k = 0; k < parts.size(); ++k) {
      if (!parts[k].empty()) used.push_back(k);
    }
    return used;
  }

  // Slices [first, first + slices.size()) of a grant striped over `lanes` lanes, cut into each
  // lane's part, every slice with that lane's id of its region (one lock for all of them).
  struct Stripe {
    std::vector<std::vector<Slice>> parts;  // [lane]
    std::vector<std::uint64_t> first_row;   // [lane]: the row of parts[lane][0] in the lane's part
  };
  // kInvalidArgument: a region this engine does not have, a slice empty or outside its region (the
  // lanes check the same; checked here before any part is made).
  Result<Stripe> Cut(std::span<const Slice> slices, std::uint64_t first,
                     std::uint32_t lanes) const {
    Stripe out{std::vector<std::vector<Slice>>(lanes), std::vector<std::uint64_t>(lanes, 0)};
    MutexLock lock(&mu_);
    for (std::uint64_t i = 0; i < slices.size(); ++i) {
      const Slice& slice = slices[i];
      auto it = regions_.find(slice.region.value);
      if (it == regions_.end()) {
        return Status::InvalidArgument("unknown region " + std::to_string(slice.region.value));
      }
      if (slice.length == 0 || slice.offset > it->second.length ||
          slice.length > it->second.length - slice.offset) {
        return Status::InvalidArgument("slice [" + std::to_string(slice.offset) + ", +" +
                                       std::to_string(slice.length) + ") is not inside region " +
                                       std::to_string(slice.region.value));
      }
      const std::uint64_t g = first + i;
      const std::uint32_t k = LaneOf(g, lanes);
      if (out.parts[k].empty()) out.first_row[k] = g / lanes;
      out.parts[k].push_back({it->second.ids[k], slice.offset, slice.length});
    }
    return out;
  }

  // The lanes check their own parts; slices on different lanes must not overlap either.
  Status CheckNoOverlap(std::span<const Slice> slices) const {
    std::vector<std::pair<std::uintptr_t, std::uint64_t>> ranges;
    ranges.reserve(slices.size());
    {
      MutexLock lock(&mu_);
      for (const Slice& s : slices) {
        auto it = regions_.find(s.region.value);
        if (it == regions_.end()) {
          return Status::InvalidArgument("unknown region " + std::to_string(s.region.value));
        }
        // Bounds are the lanes' to check; an offset past the region only has to not wrap here.
        if (s.offset > it->second.length || s.length > it->second.length - s.offset) continue;
        ranges.emplace_back(it->second.base + s.offset, s.length);
      }
    }
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i) {
      if (ranges[i - 1].first + ranges[i - 1].second > ranges[i].first) {
        return Status::InvalidArgument("two slices of the grant overlap");
      }
    }
    return Status::Ok();
  }

  // A part of `multi` could not be made (its lane's connection failed, or a check of the lane's
  // own): the parts made before it are cancelled and waited for — a grant's, which no sender knows
  // of, have nothing in flight; a send's may, and its source memory is the caller's again when this
  // returns — and the operation, which the caller never gets, completes with them. (Called on a
  // part's own progress thread — an on_complete of a single-lane op — it cannot wait for that part:
  // the part is cancelled and ends when that thread next runs its completions.)
  void Abandon(Multi& multi, const std::vector<TransferOp>& made) {
    {
      MutexLock lock(&multi.mu);
      multi.abandoned = true;
      multi.remaining -= static_cast<std::uint32_t>(multi.lanes.size() - made.size());
    }
    (multi.grant ? grants_failed_ : sends_failed_).fetch_add(1, std::memory_order_relaxed);
    for (std::size_t j = 0; j < made.size(); ++j) {
      const std::uint32_t lane = multi.lanes[j];
      if (multi.grant) {
        OnLane(lane, [&](auto& core) { return core.CancelGrant(multi.id); }).IgnoreError();
      } else {
        OnLane(lane, [&](auto& core) {
          return core.CancelSend(multi.peer, multi.id);
        }).IgnoreError();
      }
      if (!lanes_[lane]->OnThread()) static_cast<void>(made[j].Wait());
    }
  }

  // A part's on_complete (on its lane's progress thread: it never waits for another lane). The
  // last part completes the operation, on the coordinator thread, with the first part's error if
  // any. A grant part that failed has the coordinator cancel the grant's other parts, as a
  // single-lane grant fails whole (a refused slice, a deadline): the sender learns it from every
  // lane's "done". A send part that failed does not cancel the others: each ends on its own (its
  // receiver's answer, the peer's failure or the deadline), where a cancel of a part with a
  // rendezvous in flight would close that lane's connection under every other transfer on it.
  TransferCallback PartDone(const std::shared_ptr<Multi>& multi) {
    return [this, multi](TransferId, const Status& status) {
      const int kind = multi->grant ? 0 : 1;
      (status.ok() ? parts_ok_ : parts_failed_)[kind].fetch_add(1, std::memory_order_relaxed);
      bool last = false;
      bool cancel = false;
      {
        MutexLock lock(&multi->mu);
        if (!status.ok() && multi->first_error.ok()) {
          multi->first_error = status;
          cancel = multi->grant;
        }
        last = --multi->remaining == 0;
      }
      if (cancel && !last) {
        Post([this, multi] {
          for (std::uint32_t k : multi->lanes) {
            OnLane(k, [&](auto& core) { return core.CancelGrant(multi->id); }).IgnoreError();
          }
        });
      }
      if (!last) return;
      Post([this, multi] {
        Status status;
        bool abandoned = false;
        {
          MutexLock lock(&multi->mu);
          status = multi->first_error;
          abandoned = multi->abandoned;
        }
        if (!abandoned) {
          auto& ok = multi->grant ? grants_ok_ : sends_ok_;
          auto& failed = multi->grant ? grants_failed_ : sends_failed_;
          (status.ok() ? ok : failed).fetch_add(1, std::memory_order_relaxed);
        }
        multi->op->Complete(status);
      });
    };
  }

  void Post(std::function<void()> fn) {
    {
      MutexLock lock(&queue_mu_);
      queue_.push_back(std::move(fn));
    }
    queue_cv_.notify_one();
  }

  void Coordinate() {
    std::vector<std::function<void()>> batch;
    while (true) {
      {
        MutexLock lock(&queue_mu_);
        AwaitCondition(queue_cv_, queue_mu_, [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
          return !queue_.empty() || coordinator_stop_;
        });
        if (queue_.empty()) return;  // stopping, and nothing left to run
        batch.swap(queue_);
      }
      for (auto& fn : batch) fn();
      batch.clear();
    }
  }

  void Stop() {
    if (coordinator_.joinable()) {
      // From now on an engine call (an on_complete the coordinator runs may make one) fails
      // without touching a lane; wait out one that runs.
      closing_.store(true, std::memory_order_release);
      std::promise<void> passed;
      Post([&passed] { passed.set_value(); });
      passed.get_future().wait();
    }
    // Each lane completes its operations (kCancelled) as it stops; their last parts post the
    // multi-lane completions, which the coordinator runs before it stops.
    while (!lanes_.empty()) lanes_.pop_back();
    if (coordinator_.joinable()) {
      {
        MutexLock lock(&queue_mu_);
        coordinator_stop_ = true;
      }
      queue_cv_.notify_one();
      coordinator_.join();
    }
  }

  const TransferEngineOptions options_;
  std::vector<std::unique_ptr<internal::EngineLane>> lanes_;
  WorkerAddress address_;

  mutable Mutex mu_;
  std::unordered_map<PeerId, std::uint32_t> peer_lanes_ KVMESH_GUARDED_BY(mu_);
  // A region's id (lane 0's) → its memory and its id on each lane.
  struct Region {
    std::uintptr_t base = 0;
    std::uint64_t length = 0;
    std::vector<RegionId> ids;
    bool closing = false;  // a DeregisterRegion is closing it on the lanes
  };
  std::unordered_map<std::uint32_t, Region> regions_ KVMESH_GUARDED_BY(mu_);

  // Multi-lane operations, and their parts, for stats(): [0] grants, [1] sends.
  std::atomic<std::uint64_t> grants_started_{0}, grants_ok_{0}, grants_failed_{0};
  std::atomic<std::uint64_t> sends_started_{0}, sends_ok_{0}, sends_failed_{0};
  std::array<std::atomic<std::uint64_t>, 2> parts_started_{}, parts_ok_{}, parts_failed_{};

  std::thread coordinator_;
  std::atomic<bool> closing_{false};
  Mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::vector<std::function<void()>> queue_ KVMESH_GUARDED_BY(queue_mu_);
  bool coordinator_stop_ KVMESH_GUARDED_BY(queue_mu_) = false;
};

Result<std::unique_ptr<TransferEngine>> TransferEngine::Create(
    const TransferEngineOptions& options) {
  KVMESH_RETURN_IF_ERROR(ValidateOptions(options));
  auto impl = std::make_unique<Impl>(options);
  KVMESH_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<TransferEngine>(new TransferEngine(std::move(impl)));
}

TransferEngine::TransferEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TransferEngine::~TransferEngine() = default;

const WorkerAddress& TransferEngine::address() const { return impl_->address(); }

Status TransferEngine::Connect(PeerId peer, const WorkerAddress& address) {
  return impl_->Connect(peer, address);
}

Status TransferEngine::Disconnect(PeerId peer) { return impl_->Disconnect(peer); }

Result<RegionId> TransferEngine::RegisterRegion(void* base, std::size_t length) {
  return impl_->RegisterRegion(base, length);
}

Status TransferEngine::DeregisterRegion(RegionId region) { return impl_->DeregisterRegion(region); }

Result<TransferOp> TransferEngine::Grant(const GrantRequest& request) {
  return impl_->Grant(request);
}

Status TransferEngine::CancelGrant(TransferId transfer) { return impl_->CancelGrant(transfer); }

Result<TransferOp> TransferEngine::Send(const SendRequest& request) { return impl_->Send(request); }

Status TransferEngine::CancelSend(PeerId peer, TransferId transfer) {
  return impl_->CancelSend(peer, transfer);
}

TransferStats TransferEngine::stats() const { return impl_->stats(); }

}  // namespace kvmesh
