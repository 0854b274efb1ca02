#include "transfer/ucx_context.h"

#include <initializer_list>
#include <string>
#include <string_view>

namespace kvmesh {
namespace {

// Releases a ucp_config_t on every path out of Create.
class ConfigHolder {
 public:
  explicit ConfigHolder(ucp_config_t* config) : config_(config) {}
  ~ConfigHolder() { ucp_config_release(config_); }
  ConfigHolder(const ConfigHolder&) = delete;
  ConfigHolder& operator=(const ConfigHolder&) = delete;
  [[nodiscard]] ucp_config_t* get() const { return config_; }

 private:
  ucp_config_t* config_;
};

Status Modify(ucp_config_t* config, const std::string& key, const std::string& value) {
  const ucs_status_t status = ucp_config_modify(config, key.c_str(), value.c_str());
  if (status != UCS_OK) {
    return Status::InvalidArgument("ucx config " + key + "=" + value + ": " +
                                   ucs_status_string(status));
  }
  return Status::Ok();
}

// Whether UCX_TLS = `tls` may open a transport of `names` (UCX 1.13 warns about a transport key
// that no opened transport takes, so keys are set only for transports that can be there). An empty
// list, "all" or an exclusion list ("^ib") may open anything.
bool MayUse(const std::string& tls, std::initializer_list<std::string_view> names) {
  if (tls.empty() || tls.front() == '^') return true;
  std::size_t start = 0;
  while (start <= tls.size()) {
    std::size_t end = tls.find(',', start);
    if (end == std::string::npos) end = tls.size();
    const std::string_view item = std::string_view(tls).substr(start, end - start);
    if (item == "all") return true;
    for (std::string_view name : names) {
      if (item == name) return true;
    }
    start = end + 1;
  }
  return false;
}

Status ApplyOptions(ucp_config_t* config, const UcxContextOptions& options) {
  if (options.tcp_tx_seg_size != 0 && options.tcp_rx_seg_size != 0 &&
      options.tcp_rx_seg_size < options.tcp_tx_seg_size) {
    return Status::InvalidArgument("tcp_rx_seg_size " + std::to_string(options.tcp_rx_seg_size) +
                                   " is below tcp_tx_seg_size " +
                                   std::to_string(options.tcp_tx_seg_size));
  }
  if (!options.tls.empty()) KVMESH_RETURN_IF_ERROR(Modify(config, "TLS", options.tls));
  if (!options.net_devices.empty()) {
    KVMESH_RETURN_IF_ERROR(Modify(config, "NET_DEVICES", options.net_devices));
  }
  // Transport keys: UCX 1.13 matches them against each transport's table without its prefix.
  const bool tcp = MayUse(options.tls, {"tcp"});
  const bool mm = MayUse(options.tls, {"posix", "sysv", "sm", "shm", "mm"});
  const bool cma = MayUse(options.tls, {"cma", "sm", "shm"});
  if (tcp && options.tcp_tx_seg_size != 0) {
    KVMESH_RETURN_IF_ERROR(Modify(config, "TX_SEG_SIZE", std::to_string(options.tcp_tx_seg_size)));
  }
  if (tcp && options.tcp_rx_seg_size != 0) {
    KVMESH_RETURN_IF_ERROR(Modify(config, "RX_SEG_SIZE", std::to_string(options.tcp_rx_seg_size)));
  }
  if (options.keepalive_interval.count() > 0) {
    KVMESH_RETURN_IF_ERROR(Modify(config, "KEEPALIVE_INTERVAL",
                                  std::to_string(options.keepalive_interval.count()) + "ms"));
  }
  if (options.shm_peer_error_handling && mm) {
    KVMESH_RETURN_IF_ERROR(Modify(config, "MM_ERROR_HANDLING", "y"));
  }
  if (options.shm_peer_error_handling && cma) {
    KVMESH_RETURN_IF_ERROR(Modify(config, "MEMORY_INVALIDATE", "y"));
  }
  for (const auto& [key, value] : options.extra) KVMESH_RETURN_IF_ERROR(Modify(config, key, value));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<UcxContext>> UcxContext::Create(const UcxContextOptions& options) {
  ucp_config_t* raw_config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &raw_config);
  if (status != UCS_OK) return UcsToStatus(status, "ucp_config_read");
  ConfigHolder config(raw_config);
  KVMESH_RETURN_IF_ERROR(ApplyOptions(config.get(), options));

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;  // each worker is confined to one thread (ucx_worker.h)
  ucp_context_h context = nullptr;
  status = ucp_init(&params, config.get(), &context);
  if (status != UCS_OK) return UcsToStatus(status, "ucp_init (tls '" + options.tls + "')");
  return std::unique_ptr<UcxContext>(new UcxContext(context, options));
}

UcxContext::~UcxContext() { ucp_cleanup(context_); }

Status UcsToStatus(ucs_status_t status, std::string_view what) {
  std::string message = std::string(what) + ": " + ucs_status_string(status);
  if (UCS_IS_LINK_ERROR(status) || UCS_IS_ENDPOINT_ERROR(status)) {
    return Status::PeerUnreachable(std::move(message));
  }
  switch (status) {
    case UCS_OK: return Status::Ok();
    case UCS_ERR_CANCELED: return Status::Cancelled(std::move(message));
    case UCS_ERR_TIMED_OUT: return Status::TimedOut(std::move(message));
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_SHMEM_SEGMENT: return Status::PeerUnreachable(std::move(message));
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_OUT_OF_RANGE: return Status::ResourceExhausted(std::move(message));
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_MESSAGE_TRUNCATED: return Status::InvalidArgument(std::move(message));
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE: return Status::NotSupported(std::move(message));
    case UCS_ERR_IO_ERROR: return Status::IoError(std::move(message));
    case UCS_ERR_NO_ELEM: return Status::NotFound(std::move(message));
    default: return Status::Internal(std::move(message));
  }
}

}  // namespace kvmesh
