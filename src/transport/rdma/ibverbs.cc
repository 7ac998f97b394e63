// The verbs of verbs.h over libibverbs (rdma-core). Compiled only when the
// build finds libibverbs. Never run here (no RDMA device): docs/rdma.md
// lists what has been reviewed but not executed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "base/log.h"
#include "transport/rdma/verbs.h"

namespace baton::rdma {

namespace {

Status VerbsError(const std::string& what, int err) {
  return ErrnoError(what, err != 0 ? err : EIO);
}

uint32_t SpeedMbps(const ibv_port_attr& a) {
  // active_speed: per-lane rate code; active_width: 1, 2 (4x), 4 (8x), 8 (12x).
  uint32_t lane = 0;
  switch (a.active_speed) {
    case 1:
      lane = 2500;
      break;  // SDR
    case 2:
      lane = 5000;
      break;  // DDR
    case 4:
    case 8:
      lane = 10000;
      break;  // QDR, FDR10
    case 16:
      lane = 14000;
      break;  // FDR
    case 32:
      lane = 25000;
      break;  // EDR
    case 64:
      lane = 50000;
      break;  // HDR
    case 128:
      lane = 100000;
      break;  // NDR
    default:
      lane = 0;
  }
  int lanes = a.active_width == 2 ? 4 : a.active_width == 4 ? 8 : a.active_width == 8 ? 12 : 1;
  return lane * static_cast<uint32_t>(lanes);
}

int NumaNodeOf(const std::string& device) {
  std::ifstream in("/sys/class/infiniband/" + device + "/device/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node;
}

class IbMemory : public MemoryRegion {
 public:
  ibv_mr* mr = nullptr;
  void* block = nullptr;
  ~IbMemory() override {
    if (mr != nullptr) {
      if (int err = ibv_dereg_mr(mr); err != 0)
        BATON_WARN(kLogNet, "ibv_dereg_mr: %s", strerror(err));
    }
    free(block);
  }
  void Set() {
    data_ = static_cast<uint8_t*>(mr->addr);
    bytes_ = mr->length;
    lkey_ = mr->lkey;
    rkey_ = mr->rkey;
  }
};

class IbCq : public CompletionQueue {
 public:
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  ~IbCq() override {
    if (cq != nullptr) {
      if (int err = ibv_destroy_cq(cq); err != 0)
        BATON_WARN(kLogNet, "ibv_destroy_cq: %s", strerror(err));
    }
    if (channel != nullptr) {
      if (int err = ibv_destroy_comp_channel(channel); err != 0)
        BATON_WARN(kLogNet, "ibv_destroy_comp_channel: %s", strerror(err));
    }
  }
  Status Poll(Completion* out, int max, int* got) override {
    ibv_wc wc[32];
    const int n = ibv_poll_cq(cq, std::min(max, 32), wc);
    if (n < 0) return SystemError("ibv_poll_cq failed (the completion queue is broken)");
    for (int i = 0; i < n; ++i) {
      Completion& c = out[i];
      c = Completion{};
      c.wr_id = wc[i].wr_id;
      c.ok = wc[i].status == IBV_WC_SUCCESS;
      if (!c.ok) {
        c.error = ibv_wc_status_str(wc[i].status);
        c.error += " (vendor error " + std::to_string(wc[i].vendor_err) + ")";
        continue;  // the other fields are undefined for errors
      }
      if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        c.op = Completion::Op::kRecvImm;
        c.imm = ntohl(wc[i].imm_data);
        c.byte_len = wc[i].byte_len;
      } else {
        c.op = Completion::Op::kWrite;
      }
    }
    *got = n;
    return Status::Ok();
  }
  Status Arm() override {
    if (int err = ibv_req_notify_cq(cq, 0); err != 0) return VerbsError("ibv_req_notify_cq", err);
    return Status::Ok();
  }
  int fd() const override { return channel->fd; }
  void DrainEvents() override {
    unsigned events = 0;
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    // The channel's fd is non-blocking: -1 with EAGAIN once drained.
    while (ibv_get_cq_event(channel, &ev_cq, &ev_ctx) == 0) ++events;
    if (events > 0) ibv_ack_cq_events(cq, events);
  }
};

struct PortState {
  uint8_t port = 1;
  ibv_port_attr attr{};
  int gid_index = 0;
  ibv_gid gid{};
  int traffic_class = 0;
  bool ethernet = false;
};

class IbQp : public QueuePair {
 public:
  ibv_qp* qp = nullptr;
  const PortState* port = nullptr;
  uint32_t psn = 0;
  int inline_bytes = 0;  // cap.max_inline_data as ibv_create_qp granted it
  ~IbQp() override {
    if (qp != nullptr) {
      if (int err = ibv_destroy_qp(qp); err != 0)
        BATON_WARN(kLogNet, "ibv_destroy_qp: %s", strerror(err));
    }
  }
  QpAddress address() const override {
    QpAddress a;
    a.qpn = qp->qp_num;
    a.psn = psn;
    a.lid = port->attr.lid;
    a.mtu = static_cast<uint8_t>(port->attr.active_mtu);
    a.gid_index = static_cast<uint8_t>(port->gid_index);
    memcpy(a.gid, port->gid.raw, 16);
    return a;
  }
  Status Connect(const QpAddress& r) override {
    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = static_cast<ibv_mtu>(std::min<int>(r.mtu, port->attr.active_mtu));
    rtr.dest_qp_num = r.qpn;
    rtr.rq_psn = r.psn;
    rtr.max_dest_rd_atomic = 1;
    rtr.min_rnr_timer = 12;
    rtr.ah_attr.port_num = port->port;
    rtr.ah_attr.dlid = r.lid;
    if (port->ethernet || r.lid == 0) {
      rtr.ah_attr.is_global = 1;
      memcpy(rtr.ah_attr.grh.dgid.raw, r.gid, 16);
      rtr.ah_attr.grh.sgid_index = static_cast<uint8_t>(port->gid_index);
      rtr.ah_attr.grh.hop_limit = 255;
      rtr.ah_attr.grh.traffic_class = static_cast<uint8_t>(port->traffic_class);
    }
    int err = ibv_modify_qp(qp, &rtr,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (err != 0) return VerbsError("ibv_modify_qp to RTR", err);
    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.timeout = 20;   // 4.096 us * 2^20, about 4 s per try (NCCL_IB_TIMEOUT's default)
    rts.retry_cnt = 7;  // then "transport retry counter exceeded": the peer is gone
    rts.rnr_retry = 7;  // receives are always posted ahead; 7 retries forever
    rts.sq_psn = psn;
    rts.max_rd_atomic = 1;
    err = ibv_modify_qp(qp, &rts,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (err != 0) return VerbsError("ibv_modify_qp to RTS", err);
    return Status::Ok();
  }
  int max_inline() const override { return inline_bytes; }
  Status PostWrite(uint64_t wr_id, const MemoryRegion& mr, const uint8_t* src, size_t len,
                   uint64_t remote_addr, uint32_t rkey, const WriteFlags& flags) override {
    if (flags.inline_data && len > static_cast<size_t>(inline_bytes))
      return InvalidUsage("RDMA: an inline write of " + std::to_string(len) +
                          " bytes on a queue pair that takes " + std::to_string(inline_bytes));
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uint64_t>(src);
    sge.length = static_cast<uint32_t>(len);
    sge.lkey = mr.lkey();
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = flags.with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags =
        (flags.signaled ? IBV_SEND_SIGNALED : 0) | (flags.inline_data ? IBV_SEND_INLINE : 0);
    wr.imm_data = htonl(flags.imm);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    if (int err = ibv_post_send(qp, &wr, &bad); err != 0) return VerbsError("ibv_post_send", err);
    return Status::Ok();
  }
  Status PostRecvs(uint64_t wr_id, int count) override {
    std::vector<ibv_recv_wr> wrs(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      wrs[i].wr_id = wr_id;
      wrs[i].num_sge = 0;  // writes with immediate need no buffer
      wrs[i].next = i + 1 < count ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (count > 0) {
      if (int err = ibv_post_recv(qp, wrs.data(), &bad); err != 0)
        return VerbsError("ibv_post_recv", err);
    }
    return Status::Ok();
  }
};

class IbContext : public Context {
 public:
  DeviceInfo info;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  PortState port;
  ~IbContext() override {
    if (pd != nullptr) {
      if (int err = ibv_dealloc_pd(pd); err != 0)
        BATON_WARN(kLogNet, "ibv_dealloc_pd: %s", strerror(err));
    }
    if (ctx != nullptr && ibv_close_device(ctx) != 0)
      BATON_WARN(kLogNet, "ibv_close_device: %s", strerror(errno));
  }
  const DeviceInfo& device() const override { return info; }
  Status AllocRegistered(size_t bytes, std::unique_ptr<MemoryRegion>* out) override {
    auto m = std::make_unique<IbMemory>();
    if (posix_memalign(&m->block, 4096, bytes) != 0)
      return SystemError("out of memory for " + std::to_string(bytes) + " registered bytes");
    memset(m->block, 0, bytes);
    m->mr = ibv_reg_mr(pd, m->block, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (m->mr == nullptr)
      return VerbsError("ibv_reg_mr of " + std::to_string(bytes) + " bytes (is ulimit -l too low?)",
                        errno);
    m->Set();
    *out = std::move(m);
    return Status::Ok();
  }
  Status RegisterUser(void* addr, size_t bytes, std::unique_ptr<MemoryRegion>* out) override {
    auto m = std::make_unique<IbMemory>();
    m->mr = ibv_reg_mr(pd, addr, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (m->mr == nullptr)
      return VerbsError("ibv_reg_mr of a user buffer of " + std::to_string(bytes) +
                            " bytes (is ulimit -l too low?)",
                        errno);
    m->Set();  // block stays null: the memory is the user's
    *out = std::move(m);
    return Status::Ok();
  }
  Status CreateCq(int depth, std::unique_ptr<CompletionQueue>* out) override {
    auto cq = std::make_unique<IbCq>();
    cq->channel = ibv_create_comp_channel(ctx);
    if (cq->channel == nullptr) return VerbsError("ibv_create_comp_channel", errno);
    const int flags = fcntl(cq->channel->fd, F_GETFL);
    if (flags < 0 || fcntl(cq->channel->fd, F_SETFL, flags | O_NONBLOCK) != 0)
      return ErrnoError("fcntl on the completion channel", errno);
    cq->cq = ibv_create_cq(ctx, depth, nullptr, cq->channel, 0);
    if (cq->cq == nullptr) return VerbsError("ibv_create_cq", errno);
    *out = std::move(cq);
    return Status::Ok();
  }
  Status CreateQp(CompletionQueue* cq, int send_depth, int recv_depth, int max_inline,
                  std::unique_ptr<QueuePair>* out) override {
    auto* ib_cq = static_cast<IbCq*>(cq);
    auto qp = std::make_unique<IbQp>();
    ibv_qp_init_attr init{};
    init.send_cq = ib_cq->cq;
    init.recv_cq = ib_cq->cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = static_cast<uint32_t>(send_depth);
    init.cap.max_recv_wr = static_cast<uint32_t>(recv_depth);
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = static_cast<uint32_t>(std::max(0, max_inline));
    // Writes are signaled one in several (WriteFlags::signaled).
    init.sq_sig_all = 0;
    qp->qp = ibv_create_qp(pd, &init);
    if (qp->qp == nullptr && max_inline > 0) {
      // A device that takes less inline data refuses the queue pair rather
      // than granting less: ask again without.
      BATON_INFO(kLogNet, "ibv_create_qp with %d inline bytes: %s; again without inline writes",
                 max_inline, strerror(errno));
      init.cap.max_inline_data = 0;
      qp->qp = ibv_create_qp(pd, &init);
    }
    if (qp->qp == nullptr) return VerbsError("ibv_create_qp", errno);
    // ibv_create_qp writes what it granted back into init.cap.
    qp->inline_bytes = static_cast<int>(init.cap.max_inline_data);
    qp->port = &port;
    if (getrandom(&qp->psn, sizeof(qp->psn), 0) != sizeof(qp->psn)) qp->psn = 0;
    qp->psn &= 0xffffff;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = port.port;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (int err = ibv_modify_qp(
            qp->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        err != 0)
      return VerbsError("ibv_modify_qp to INIT", err);
    *out = std::move(qp);
    return Status::Ok();
  }
  // RoCE: a RoCE v2 GID with an IPv4-mapped address routes between
  // subnets; else any RoCE v2 one; else the first valid one.
  Status ChooseGid(int requested) {
    if (requested >= 0 || !port.ethernet) {
      port.gid_index = requested >= 0 ? requested : 0;
      if (int err = ibv_query_gid(ctx, port.port, port.gid_index, &port.gid); err != 0)
        return VerbsError("ibv_query_gid index " + std::to_string(port.gid_index), err);
      return Status::Ok();
    }
    int best = -1, best_score = -1;
    for (int i = 0; i < port.attr.gid_tbl_len; ++i) {
      ibv_gid_entry entry{};
      if (ibv_query_gid_ex(ctx, port.port, static_cast<uint32_t>(i), &entry, 0) != 0) continue;
      const uint8_t* raw = entry.gid.raw;
      bool zero = true;
      for (int b = 0; b < 16; ++b) zero = zero && raw[b] == 0;
      if (zero) continue;
      const bool v4_mapped = raw[10] == 0xff && raw[11] == 0xff &&
                             std::all_of(raw, raw + 10, [](uint8_t b) { return b == 0; });
      const int score = (entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? 2 : 0) + (v4_mapped ? 1 : 0);
      if (score > best_score) {
        best = i;
        best_score = score;
      }
    }
    if (best < 0)
      return SystemError("no valid GID on " + info.name + " port " + std::to_string(port.port) +
                         " (is the interface up with an address?)");
    port.gid_index = best;
    if (int err = ibv_query_gid(ctx, port.port, best, &port.gid); err != 0)
      return VerbsError("ibv_query_gid", err);
    return Status::Ok();
  }
};

class IbProvider : public Provider {
 public:
  std::string name() const override { return "libibverbs"; }
  Status ListDevices(std::vector<DeviceInfo>* out) override {
    out->clear();
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) {
      // ENOSYS: no kernel support (no uverbs); that is "no device", not an error.
      if (errno == ENOSYS) return Status::Ok();
      return VerbsError("ibv_get_device_list", errno);
    }
    for (int i = 0; i < n; ++i) {
      ibv_context* ctx = ibv_open_device(list[i]);
      if (ctx == nullptr) continue;
      ibv_device_attr dev{};
      if (ibv_query_device(ctx, &dev) == 0) {
        for (uint8_t p = 1; p <= dev.phys_port_cnt; ++p) {
          ibv_port_attr attr{};
          if (ibv_query_port(ctx, p, &attr) != 0) continue;
          DeviceInfo d;
          d.name = ibv_get_device_name(list[i]);
          d.port = p;
          d.active = attr.state == IBV_PORT_ACTIVE;
          d.ethernet = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
          d.numa_node = NumaNodeOf(d.name);
          d.speed_mbps = SpeedMbps(attr);
          out->push_back(d);
        }
      }
      if (ibv_close_device(ctx) != 0) BATON_WARN(kLogNet, "ibv_close_device: %s", strerror(errno));
    }
    ibv_free_device_list(list);
    return Status::Ok();
  }
  Status Open(const DeviceInfo& device, int gid_index, int traffic_class,
              std::unique_ptr<Context>* out) override {
    auto c = std::make_unique<IbContext>();
    c->info = device;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return VerbsError("ibv_get_device_list", errno);
    for (int i = 0; i < n && c->ctx == nullptr; ++i)
      if (device.name == ibv_get_device_name(list[i])) c->ctx = ibv_open_device(list[i]);
    const int open_errno = errno;
    ibv_free_device_list(list);
    if (c->ctx == nullptr) return VerbsError("ibv_open_device " + device.name, open_errno);
    c->pd = ibv_alloc_pd(c->ctx);
    if (c->pd == nullptr) return VerbsError("ibv_alloc_pd", errno);
    c->port.port = static_cast<uint8_t>(device.port);
    if (int err = ibv_query_port(c->ctx, c->port.port, &c->port.attr); err != 0)
      return VerbsError("ibv_query_port", err);
    if (c->port.attr.state != IBV_PORT_ACTIVE)
      return SystemError(device.name + " port " + std::to_string(device.port) + " is not active");
    c->port.ethernet = c->port.attr.link_layer == IBV_LINK_LAYER_ETHERNET;
    c->port.traffic_class = traffic_class;
    BATON_RETURN_IF_ERROR(c->ChooseGid(gid_index));
    *out = std::move(c);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Provider> MakeIbverbsProvider() {
  return std::make_unique<IbProvider>();
}

}  // namespace baton::rdma
