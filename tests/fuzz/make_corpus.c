/* make_corpus.c — writes the seed corpora of fuzz_request, fuzz_reply and fuzz_fetch: real
 * messages, packed by protobuf-c as qdpctl and libqdp send requests and as qdpd packs replies, and
 * FetchChunks built by the daemon's own qdp_wire_fetch_chunk (its hand-made layout, data last).
 * (fuzz_npy's seeds come from numpy: make_npy_corpus.py.)
 *
 *   make_corpus OUTDIR    writes OUTDIR/fuzz_request/, OUTDIR/fuzz_reply/, OUTDIR/fuzz_fetch/
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

#include "codec.h"
#include "qdp_wire.h"
#include "qdp.pb-c.h"

static const char *outdir;

static void write_seed(const char *harness, const char *name, const void *p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", outdir, harness);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) {
    perror(path);
    exit(1);
  }
  snprintf(path, sizeof path, "%s/%s/%s", outdir, harness, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

static void write_message(const char *harness, const char *name, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    exit(1);
  }
  protobuf_c_message_pack(m, buf);
  write_seed(harness, name, buf, n);
  free(buf);
}

/* ---- requests ---- */

static void encode_seed(const char *name, Qdp__Encoding enc, uint32_t qubits, Qdp__Input *in,
                        Qdp__Placement *pl, Qdp__DType out) {
  Qdp__EncodeRequest r = QDP__ENCODE_REQUEST__INIT;
  r.encoding = enc;
  r.qubits = qubits;
  r.input = in;
  r.placement = pl;
  r.output_dtype = out;
  write_message("fuzz_request", name, &r.base);
}

static void requests(void) {
  double amp[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float angles[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
  int64_t index = 5;
  double iqp[6] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};

  Qdp__Input in = QDP__INPUT__INIT;
  in.dtype = QDP__DTYPE__DTYPE_FLOAT64;
  in.source_case = QDP__INPUT__SOURCE_DATA;
  in.data.data = (uint8_t *)amp;
  in.data.len = sizeof amp;
  encode_seed("encode-amplitude-3-inline", QDP__ENCODING__ENCODING_AMPLITUDE, 3, &in, NULL, 0);

  Qdp__Placement batch = QDP__PLACEMENT__INIT;
  batch.policy = QDP__POLICY__POLICY_BATCH;
  in.dtype = QDP__DTYPE__DTYPE_FLOAT32;
  in.rows = 2;
  in.cols = 4;
  in.data.data = (uint8_t *)angles;
  in.data.len = sizeof angles;
  encode_seed("encode-angle-4-batch2-float32", QDP__ENCODING__ENCODING_ANGLE, 4, &in, &batch,
              QDP__DTYPE__DTYPE_COMPLEX64);

  in.dtype = QDP__DTYPE__DTYPE_INT64;
  in.rows = 0;
  in.cols = 0;
  in.data.data = (uint8_t *)&index;
  in.data.len = sizeof index;
  encode_seed("encode-basis-3", QDP__ENCODING__ENCODING_BASIS, 3, &in, NULL,
              QDP__DTYPE__DTYPE_COMPLEX128);

  char *two[] = {"cpu:0", "cpu:1"};
  Qdp__Placement even = QDP__PLACEMENT__INIT;
  even.policy = QDP__POLICY__POLICY_EVEN;
  even.n_devices = 2;
  even.devices = two;
  in.dtype = QDP__DTYPE__DTYPE_FLOAT64;
  in.data.data = (uint8_t *)iqp;
  in.data.len = sizeof iqp;
  encode_seed("encode-iqp-3-even-two-devices", QDP__ENCODING__ENCODING_IQP, 3, &in, &even, 0);

  char *three[] = {"cpu:2", "cpu:0", "cpu:3"};
  Qdp__Placement uneven = QDP__PLACEMENT__INIT;
  uneven.policy = QDP__POLICY__POLICY_UNEVEN;
  uneven.n_devices = 3;
  uneven.devices = three;
  in.data.len = 3 * sizeof(double);
  encode_seed("encode-phase-3-uneven-three-devices", QDP__ENCODING__ENCODING_PHASE, 3, &in, &uneven,
              0);
  Qdp__Placement capacity = QDP__PLACEMENT__INIT;
  capacity.policy = QDP__POLICY__POLICY_CAPACITY;
  encode_seed("encode-iqp-z-3-capacity", QDP__ENCODING__ENCODING_IQP_Z, 3, &in, &capacity, 0);

  /* A Plan of data still to be streamed: dtype and shape only. */
  Qdp__Input decl = QDP__INPUT__INIT;
  decl.dtype = QDP__DTYPE__DTYPE_FLOAT64;
  decl.rows = 1;
  decl.cols = UINT64_C(1) << 30;
  char *ranks[] = {"r0/cpu:0", "r0/cpu:1", "r1/cpu:0", "r1/cpu:1"};
  Qdp__Placement world = QDP__PLACEMENT__INIT;
  world.policy = QDP__POLICY__POLICY_EVEN;
  world.n_devices = 4;
  world.devices = ranks;
  encode_seed("plan-amplitude-30-declared-even-two-ranks", QDP__ENCODING__ENCODING_AMPLITUDE, 30,
              &decl, &world, 0);
  decl.rows = 0;
  decl.cols = 34;
  encode_seed("plan-angle-34-declared-auto", QDP__ENCODING__ENCODING_ANGLE, 34, &decl, NULL,
              QDP__DTYPE__DTYPE_COMPLEX64);
  char *gpus[] = {"cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5", "cuda:6", "cuda:7"};
  Qdp__Placement eight = QDP__PLACEMENT__INIT;
  eight.policy = QDP__POLICY__POLICY_EVEN;
  eight.n_devices = 8;
  eight.devices = gpus;
  decl.cols = 36 + 36 * 35 / 2;
  encode_seed("plan-iqp-36-declared-even-eight", QDP__ENCODING__ENCODING_IQP, 36, &decl, &eight, 0);

  Qdp__SharedMemory shm = QDP__SHARED_MEMORY__INIT;
  shm.name = "/qdp-input";
  shm.length = 8 * sizeof(double);
  Qdp__Input byshm = QDP__INPUT__INIT;
  byshm.dtype = QDP__DTYPE__DTYPE_FLOAT64;
  byshm.rows = 2;
  byshm.source_case = QDP__INPUT__SOURCE_SHM;
  byshm.shm = &shm;
  encode_seed("encode-amplitude-2-shm-batch2", QDP__ENCODING__ENCODING_AMPLITUDE, 2, &byshm, NULL,
              0);
  Qdp__SharedMemory region = QDP__SHARED_MEMORY__INIT;
  region.region = "r1";
  region.region_token = "0123456789abcdef0123456789abcdef";
  region.offset = 4096;
  region.length = 1u << 20;
  byshm.rows = 0;
  byshm.shm = &region;
  encode_seed("encode-amplitude-17-region", QDP__ENCODING__ENCODING_AMPLITUDE, 17, &byshm, NULL, 0);

  Qdp__Input bypath = QDP__INPUT__INIT;
  bypath.source_case = QDP__INPUT__SOURCE_PATH;
  bypath.path = "/data/input.npy";
  Qdp__EncodeRequest full = QDP__ENCODE_REQUEST__INIT;
  full.encoding = QDP__ENCODING__ENCODING_AMPLITUDE;
  full.qubits = 20;
  full.input = &bypath;
  full.ttl_seconds = 3600;
  full.views = true;
  full.label = "epoch 3 batch 17";
  full.client_pid = 4242;
  write_message("fuzz_request", "encode-amplitude-20-path-views-label", &full.base);

  /* EncodeUpload: the first message declares the input, the next ones carry its bytes. */
  Qdp__EncodeRequest up = QDP__ENCODE_REQUEST__INIT;
  up.encoding = QDP__ENCODING__ENCODING_AMPLITUDE;
  up.qubits = 4;
  Qdp__Input upin = QDP__INPUT__INIT;
  upin.dtype = QDP__DTYPE__DTYPE_FLOAT64;
  upin.rows = 4;
  upin.cols = 16;
  up.input = &upin;
  Qdp__UploadChunk first = QDP__UPLOAD_CHUNK__INIT;
  first.request = &up;
  write_message("fuzz_request", "upload-first-declared", &first.base);
  upin.cols = 0;
  first.data.data = (uint8_t *)amp;
  first.data.len = sizeof amp;
  write_message("fuzz_request", "upload-first-undeclared-with-data", &first.base);
  Qdp__UploadChunk later = QDP__UPLOAD_CHUNK__INIT;
  later.data.data = (uint8_t *)amp;
  later.data.len = sizeof amp;
  write_message("fuzz_request", "upload-data", &later.base);
  later.last = true;
  write_message("fuzz_request", "upload-data-last", &later.base);

  Qdp__StateRef ref = QDP__STATE_REF__INIT;
  ref.handle = "s00000000000000000001";
  ref.token = "0123456789abcdef0123456789abcdef";
  write_message("fuzz_request", "release", &ref.base);
  Qdp__DescribeRequest desc = QDP__DESCRIBE_REQUEST__INIT;
  desc.handle = ref.handle;
  desc.token = ref.token;
  desc.views = true;
  desc.client_pid = 4242;
  write_message("fuzz_request", "describe-views", &desc.base);
  Qdp__FetchRequest fetch = QDP__FETCH_REQUEST__INIT;
  fetch.state = &ref;
  fetch.offset = 16;
  fetch.count = 1024;
  fetch.chunk_bytes = 4096;
  write_message("fuzz_request", "fetch-range", &fetch.base);
  Qdp__ExportRequest exp = QDP__EXPORT_REQUEST__INIT;
  exp.state = &ref;
  exp.path = "/data/state.npy";
  exp.overwrite = true;
  write_message("fuzz_request", "export-overwrite", &exp.base);
  Qdp__GatherRequest gather = QDP__GATHER_REQUEST__INIT;
  gather.state = &ref;
  gather.device = "cuda:0";
  gather.ttl_seconds = 60;
  gather.label = "gathered";
  write_message("fuzz_request", "gather", &gather.base);
  Qdp__RegisterRegionRequest reg = QDP__REGISTER_REGION_REQUEST__INIT;
  reg.name = "/my-shm";
  write_message("fuzz_request", "region-register-name", &reg.base);
  Qdp__CloseViewRequest close = QDP__CLOSE_VIEW_REQUEST__INIT;
  close.handle = ref.handle;
  close.token = ref.token;
  close.lease_id = 7;
  write_message("fuzz_request", "close-view", &close.base);
}

/* ---- replies ---- */

static uint8_t ipc_bytes[64];

static void shard(Qdp__Shard *s, int rank, char *device, uint64_t first, uint64_t count,
                  uint64_t bytes) {
  qdp__shard__init(s);
  s->rank = rank;
  s->device = device;
  s->ordinal = device[strlen(device) - 1] - '0';
  s->first = first;
  s->count = count;
  s->rows = 1;
  s->bytes = bytes;
  s->host = "node1";
}

static void replies(void) {
  Qdp__Shard sh[2];
  shard(&sh[0], 0, "cuda:0", 0, 1u << 19, 8u << 20);
  shard(&sh[1], 1, "cuda:1", 1u << 19, 1u << 19, 8u << 20);
  sh[0].uuid = "GPU-8f6d4c2a-1b3e-4f5a-9c7d-0e1f2a3b4c5d";
  sh[0].ipc_handle.data = ipc_bytes;
  sh[0].ipc_handle.len = sizeof ipc_bytes;
  sh[0].ipc_offset = 512;
  sh[0].lease_id = 3;
  Qdp__Shard *shards[2] = {&sh[0], &sh[1]};

  Qdp__StateInfo st = QDP__STATE_INFO__INIT;
  st.handle = "s00000000000000000001";
  st.token = "0123456789abcdef0123456789abcdef";
  st.encoding = QDP__ENCODING__ENCODING_AMPLITUDE;
  st.qubits = 20;
  st.batch = 1;
  st.dtype = QDP__DTYPE__DTYPE_COMPLEX128;
  st.bytes = 16u << 20;
  st.policy = "even";
  st.global_bits = 1;
  st.n_shards = 2;
  st.shards = shards;
  st.collective = "nccl";
  st.created_unix_ms = 1733000000000;
  st.expires_unix_ms = 1733003600000;
  st.label = "epoch 3";
  st.owner = "uid:1000";
  st.encode_ms = 1.25;
  st.leases = 1;
  write_message("fuzz_reply", "state-info-two-shards-views", &st.base);
  Qdp__EncodeReply enc = QDP__ENCODE_REPLY__INIT;
  enc.state = &st;
  write_message("fuzz_reply", "encode-reply", &enc.base);

  Qdp__DeviceNeed nd[2];
  for (size_t i = 0; i < 2; i++) {
    qdp__device_need__init(&nd[i]);
    nd[i].rank = (int)i;
    nd[i].device = sh[i].device;
    nd[i].shard_bytes = sh[i].bytes;
    nd[i].workspace_bytes = 4104;
    nd[i].need_bytes = sh[i].bytes + 4104;
    nd[i].budget_bytes = i ? 1u << 20 : 1u << 30;
    nd[i].fits = i == 0;
  }
  Qdp__DeviceNeed *needs[2] = {&nd[0], &nd[1]};
  Qdp__PlanReply plan = QDP__PLAN_REPLY__INIT;
  plan.policy = "even";
  plan.global_bits = 1;
  plan.total_bytes = 16u << 20;
  plan.n_shards = 2;
  plan.shards = shards;
  plan.n_needs = 2;
  plan.needs = needs;
  plan.message = "20-qubit complex128 state (16777216 B) does not fit: cuda:1 needs 8392712 B";
  write_message("fuzz_reply", "plan-reply-infeasible", &plan.base);

  Qdp__StateInfo listed = st;
  listed.token = NULL;
  Qdp__StateInfo *states[2] = {&listed, &listed};
  Qdp__ListReply list = QDP__LIST_REPLY__INIT;
  list.n_states = 2;
  list.states = states;
  write_message("fuzz_reply", "list-two-states", &list.base);

  Qdp__Device dev[2];
  Qdp__Device *devs[2] = {&dev[0], &dev[1]};
  for (size_t i = 0; i < 2; i++) {
    qdp__device__init(&dev[i]);
    dev[i].name = i ? "cpu:1" : "cpu:0";
    dev[i].kind = "cpu";
    dev[i].ordinal = (int)i;
    dev[i].model = "host memory";
    dev[i].total_bytes = dev[i].free_bytes = dev[i].budget_bytes = 1u << 30;
    dev[i].host = "node1";
    dev[i].numa_node = -1;
  }
  Qdp__Link link[4];
  Qdp__Link *links[4];
  for (size_t i = 0; i < 4; i++) {
    qdp__link__init(&link[i]);
    link[i].from = (uint32_t)(i / 2);
    link[i].to = (uint32_t)(i % 2);
    link[i].kind = i / 2 == i % 2 ? "self" : "host";
    link[i].peer = true;
    link[i].perf_rank = -1;
    links[i] = &link[i];
  }
  Qdp__RankInfo rank = QDP__RANK_INFO__INIT;
  rank.host = "node1";
  rank.devices = 2;
  Qdp__RankInfo *rank_info[1] = {&rank};
  Qdp__StatusReply status = QDP__STATUS_REPLY__INIT;
  status.version = "0.1.0";
  status.uptime_ms = 12345;
  status.backend = "cpu";
  status.ranks = 1;
  status.n_devices = 2;
  status.devices = devs;
  status.budget_bytes = 2u << 30;
  status.max_qubits = 40;
  status.topology_source = "host";
  status.n_links = 4;
  status.links = links;
  status.collectives = "host (one memory)";
  status.transport = "local";
  status.host_collectives = "local";
  status.device_collectives = "none";
  status.mpi_threads = "";
  status.rank_timeout_ms = 10000;
  status.n_rank_info = 1;
  status.rank_info = rank_info;
  write_message("fuzz_reply", "status-cpu2", &status.base);

  Qdp__ExportReply er = QDP__EXPORT_REPLY__INIT;
  er.path = "/data/state.npy";
  er.bytes = 16u << 20;
  write_message("fuzz_reply", "export-reply", &er.base);
  Qdp__RegionInfo ri = QDP__REGION_INFO__INIT;
  ri.handle = "r1";
  ri.token = "0123456789abcdef0123456789abcdef";
  ri.bytes = 1u << 20;
  ri.owner = "uid:1000";
  ri.sealed = true;
  write_message("fuzz_reply", "region-info", &ri.base);
}

/* ---- fetch streams ---- */

/* A growing fuzz_fetch input: flags, offset, count and buffer bytes, then length-prefixed
 * messages. */
struct stream {
  uint8_t buf[8192];
  size_t len;
};

static void put_varint(struct stream *s, uint64_t v) {
  while (v >= 0x80) {
    s->buf[s->len++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  s->buf[s->len++] = (uint8_t)v;
}

static void stream_begin(struct stream *s, uint8_t flags, uint64_t offset, uint64_t count,
                         uint64_t dst_bytes) {
  s->len = 0;
  s->buf[s->len++] = flags;
  put_varint(s, offset);
  put_varint(s, count);
  put_varint(s, dst_bytes);
}

static void stream_put(struct stream *s, const uint8_t *p, size_t n) {
  if (s->len + 10 + n > sizeof s->buf) {
    fprintf(stderr, "make_corpus: a fetch seed outgrew its buffer\n");
    exit(1);
  }
  put_varint(s, n);
  memcpy(s->buf + s->len, p, n);
  s->len += n;
}

/* A chunk exactly as qdpd sends it: qdp_wire_fetch_chunk's header, then the amplitudes. */
static void daemon_chunk(struct stream *s, uint64_t offset, int dtype, uint64_t total,
                         uint64_t first_value, size_t count) {
  size_t es = dtype == QDP__DTYPE__DTYPE_COMPLEX64 ? 8 : 16;
  uint8_t *data = NULL;
  grpc_byte_buffer *bb = qdp_wire_fetch_chunk(offset, dtype, total, count * es, &data);
  for (size_t i = 0; i < count; i++) {
    if (es == 16) {
      double v[2] = {(double)(first_value + i) / 16, 0};
      memcpy(data + i * es, v, es);
    } else {
      float v[2] = {(float)(first_value + i) / 16, 0};
      memcpy(data + i * es, v, es);
    }
  }
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb)) {
    exit(1);
  }
  grpc_slice all = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  stream_put(s, GRPC_SLICE_START_PTR(all), GRPC_SLICE_LENGTH(all));
  grpc_slice_unref(all);
  grpc_byte_buffer_destroy(bb);
}

/* The same chunk packed by protobuf-c: fields in number order, so the data is not last. */
static void packed_chunk(struct stream *s, uint64_t offset, int dtype, uint64_t total,
                         size_t count) {
  uint8_t data[16 * 16] = {0};
  Qdp__FetchChunk ch = QDP__FETCH_CHUNK__INIT;
  ch.offset = offset;
  ch.dtype = dtype;
  ch.total = total;
  ch.data.data = data;
  ch.data.len = count * (dtype == QDP__DTYPE__DTYPE_COMPLEX64 ? 8 : 16);
  uint8_t buf[512];
  size_t n = qdp__fetch_chunk__pack(&ch, buf);
  stream_put(s, buf, n);
}

static void fetches(void) {
  struct stream s;
  const int c64 = QDP__DTYPE__DTYPE_COMPLEX64, c128 = QDP__DTYPE__DTYPE_COMPLEX128;

  /* A whole 3-qubit complex128 state in two chunks, into a buffer that holds it exactly. */
  stream_begin(&s, 0x00, 0, 0, 8 * 16);
  daemon_chunk(&s, 0, c128, 8, 0, 4);
  daemon_chunk(&s, 4, c128, 8, 4, 4);
  write_seed("fuzz_fetch", "whole-c128-two-chunks", s.buf, s.len);

  /* The same arriving in 3-byte slices: varints and data split across them. */
  s.buf[0] = 0x30;
  write_seed("fuzz_fetch", "whole-c128-two-chunks-3-byte-slices", s.buf, s.len);

  /* A range [16, 48) of complex64, want complex64, written to a file (qdp_fetch_npy). */
  stream_begin(&s, 0x05, 16, 32, 0);
  for (uint64_t at = 16; at < 48; at += 8) {
    daemon_chunk(&s, at, c64, 32, at, 8);
  }
  write_seed("fuzz_fetch", "range-c64-to-file", s.buf, s.len);

  /* protobuf-c's layout (data before dtype and total) goes through the generic unpack. */
  stream_begin(&s, 0x02, 0, 4, 4 * 16);
  packed_chunk(&s, 0, c128, 4, 2);
  packed_chunk(&s, 2, c128, 4, 2);
  write_seed("fuzz_fetch", "packed-c128-generic-path", s.buf, s.len);

  /* A stream that announces more than the buffer holds, and one that stops short. */
  stream_begin(&s, 0x00, 0, 0, 4 * 16);
  daemon_chunk(&s, 0, c128, 16, 0, 4);
  write_seed("fuzz_fetch", "announces-more-than-buffer", s.buf, s.len);
  stream_begin(&s, 0x01, 0, 0, 16 * 8);
  daemon_chunk(&s, 0, c64, 16, 0, 8);
  write_seed("fuzz_fetch", "ends-short", s.buf, s.len);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_corpus OUTDIR\n");
    return 2;
  }
  outdir = argv[1];
  for (size_t i = 0; i < sizeof ipc_bytes; i++) {
    ipc_bytes[i] = (uint8_t)(i * 37 + 11);
  }
  requests();
  replies();
  fetches();
  return 0;
}
