"""An independent qdp client for the integration tests: Debian's python3-grpcio and protobuf,
loading the wire contract at run time from the FileDescriptorSet that protoc-c writes (qdp.desc),
so it shares no code with libqdp. The states it fetches are compared with tests/reference/qdpref.py.
"""

import array
import os
import socket
import struct

import grpc
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

ENCODINGS = {"amplitude": 1, "angle": 2, "basis": 3, "iqp": 4, "iqp-z": 5, "phase": 6}
DTYPES = {"float32": 1, "float64": 2, "complex64": 3, "complex128": 4, "int64": 5}
NP_DTYPE = {1: np.float32, 2: np.float64, 3: np.complex64, 4: np.complex128, 5: np.int64}
POLICIES = {"auto": 0, "single": 1, "even": 2, "uneven": 3, "capacity": 4, "batch": 5}

_MESSAGES = (
    "EncodeRequest", "EncodeReply", "PlanReply", "UploadChunk", "StateRef", "StateInfo",
    "ListRequest", "ListReply", "ReleaseReply", "FetchRequest", "FetchChunk", "ExportRequest",
    "ExportReply", "StatusRequest", "StatusReply", "HealthRequest", "HealthReply", "ErrorDetail",
    "Input", "SharedMemory", "Placement", "RegisterRegionRequest", "RegionRef", "RegionInfo",
    "UnregisterRegionReply", "DescribeRequest", "CloseViewRequest", "CloseViewReply",
    "GatherRequest", "FetchIntoRequest", "FetchIntoReply", "CudaIpcInput", "KernelRequest",
    "KernelReply", "MeasureRequest", "MeasureReply", "OpenSessionRequest", "SessionRef",
    "SessionInfo", "CloseSessionReply",
)


class Proto:
    """The message classes of qdp.proto, by short name."""

    def __init__(self, desc_path):
        with open(desc_path, "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
        pool = descriptor_pool.DescriptorPool()
        for fd in fds.file:
            pool.Add(fd)
        # Debian's protobuf 4.21 lacks GetMessageClass; newer ones have it.
        get = getattr(message_factory, "GetMessageClass", None)
        if get is None:
            get = message_factory.MessageFactory(pool).GetPrototype
        for name in _MESSAGES:
            setattr(self, name, get(pool.FindMessageTypeByName("qdp." + name)))


_UNARY = {
    "Encode": ("EncodeRequest", "EncodeReply"),
    "Plan": ("EncodeRequest", "PlanReply"),
    "Describe": ("StateRef", "StateInfo"),
    "List": ("ListRequest", "ListReply"),
    "Release": ("StateRef", "ReleaseReply"),
    "Export": ("ExportRequest", "ExportReply"),
    "Status": ("StatusRequest", "StatusReply"),
    "Health": ("HealthRequest", "HealthReply"),
    "RegisterRegion": ("RegisterRegionRequest", "RegionInfo"),
    "UnregisterRegion": ("RegionRef", "UnregisterRegionReply"),
    "CloseView": ("CloseViewRequest", "CloseViewReply"),
    "Gather": ("GatherRequest", "EncodeReply"),
    "FetchInto": ("FetchIntoRequest", "FetchIntoReply"),
    "Kernel": ("KernelRequest", "KernelReply"),
    "Measure": ("MeasureRequest", "MeasureReply"),
    "OpenSession": ("OpenSessionRequest", "SessionInfo"),
    "Heartbeat": ("SessionRef", "SessionInfo"),
    "CloseSession": ("SessionRef", "CloseSessionReply"),
}


READ, WRITE = 1, 2


class HandoffError(Exception):
    """The daemon refused a handed-over descriptor: .status ("PERMISSION_DENIED"), .message."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def handoff(sock_path, fd, access=READ, raw_header=None, fds=None):
    """Hands fd to qdpd over its Unix socket (the wire in proto/qdp.proto); returns the ticket.
    raw_header and fds override what is sent, for tests of the daemon's checks."""
    hdr = raw_header if raw_header is not None else b"QDPFD/1\n" + struct.pack("<II", access, 0)
    fds = [fd] if fds is None else fds
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(sock_path)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        s.sendmsg([hdr], anc)
        line = b""
        while not line.endswith(b"\n"):
            part = s.recv(4096)
            if not part:
                break
            line += part
    line = line.decode().rstrip("\n")
    if line.startswith("OK "):
        return line[3:]
    status, _, message = line[4:].partition(" ") if line.startswith("ERR ") else ("", "", line)
    raise HandoffError(status, message)


class Client:
    """One channel to qdpd; methods take and return protobuf messages. Over a Unix socket,
    node-local files and shared memory are opened here and their descriptors handed over, as
    every client on the daemon's node does."""

    def __init__(self, target=None, desc=None, name=None, proto=None):
        self.target = target or os.environ["QDP_TARGET"]
        self.pb = proto or Proto(desc or os.environ["QDP_DESC"])
        self.metadata = (("qdp-client", name),) if name else ()
        self.channel = grpc.insecure_channel(
            self.target, options=[("grpc.max_receive_message_length", -1),
                                  ("grpc.max_send_message_length", -1)])
        for method, (req, rep) in _UNARY.items():
            setattr(self, "_" + method, self.channel.unary_unary(
                "/qdp.Qdp/" + method,
                request_serializer=getattr(self.pb, req).SerializeToString,
                response_deserializer=getattr(self.pb, rep).FromString))
        # Describe as clients of the views era send it; "Describe" above sends a StateRef, as
        # older clients do (the two are the same on the wire for fields 1 and 2).
        self._DescribeViews = self.channel.unary_unary(
            "/qdp.Qdp/Describe", request_serializer=self.pb.DescribeRequest.SerializeToString,
            response_deserializer=self.pb.StateInfo.FromString)
        self._Fetch = self.channel.unary_stream(
            "/qdp.Qdp/Fetch", request_serializer=self.pb.FetchRequest.SerializeToString,
            response_deserializer=self.pb.FetchChunk.FromString)
        self._EncodeUpload = self.channel.stream_unary(
            "/qdp.Qdp/EncodeUpload", request_serializer=self.pb.UploadChunk.SerializeToString,
            response_deserializer=self.pb.EncodeReply.FromString)

    def close(self):
        self.channel.close()

    @property
    def socket_path(self):
        """The daemon's socket path, or None over TCP."""
        t = self.target
        return t[5:] if t.startswith("unix:") else None

    def hand(self, fd, access=READ):
        return handoff(self.socket_path, fd, access)

    def hand_file(self, path, access=READ):
        """Opens path here (with this process's rights) and hands it over; returns the ticket."""
        fd = os.open(path, os.O_RDONLY if access == READ else os.O_RDWR)
        try:
            return self.hand(fd, access)
        finally:
            os.close(fd)

    def hand_shm(self, shm):
        """Opens a SharedMemory message's object (name, or pid + fd) and fills its fd_ticket."""
        if shm.name:
            path = "/dev/shm" + shm.name
        else:
            path = f"/proc/{shm.pid}/fd/{shm.fd}"
        shm.fd_ticket = self.hand_file(path)
        return shm

    def register_region(self, path, writable=False, name=""):
        """RegisterRegion of the object at path (/dev/shm/..., /proc/PID/fd/N), opened here and
        handed over: for reading, or with writable for reading and writing (an output of
        FetchInto). Returns the RegionInfo."""
        r = self.pb.RegisterRegionRequest(name=name, writable=writable)
        r.fd_ticket = self.hand_file(path, WRITE if writable else READ)
        return self.call("RegisterRegion", r)

    def unregister_region(self, info):
        return self.call("UnregisterRegion", self.pb.RegionRef(handle=info.handle, token=info.token))

    def fetch_into(self, state, region, offset=0, count=0, region_offset=0, token=None):
        """FetchInto region (a RegionInfo) at byte region_offset; returns the FetchIntoReply."""
        req = self.pb.FetchIntoRequest(offset=offset, count=count, region_offset=region_offset)
        req.state.CopyFrom(self.ref(state, token))
        req.region.handle = region.handle
        req.region.token = region.token
        return self.call("FetchInto", req)

    def kernel(self, a, b=None, overlaps=False, region=None, region_offset=0, token=None):
        """Kernel of states a and b (b None: a with itself), into region (a RegionInfo) or the
        reply; returns the KernelReply."""
        req = self.pb.KernelRequest(overlaps=overlaps, region_offset=region_offset)
        req.a.CopyFrom(self.ref(a, token))
        if b is not None:
            req.b.CopyFrom(self.ref(b, token))
        if region is not None:
            req.region.handle = region.handle
            req.region.token = region.token
        return self.call("Kernel", req)

    def export(self, state, path, overwrite=False, token=None):
        """Export as libqdp does it: a file created here beside path, handed over, filled by the
        daemon, then renamed; over TCP the path alone. Returns the ExportReply."""
        req = self.pb.ExportRequest()
        req.state.CopyFrom(self.ref(state, token))
        req.overwrite = overwrite
        if self.socket_path is None:
            req.path = path
            return self.call("Export", req)
        d, base = os.path.split(path)
        tmp = os.path.join(d, f".{base}.{os.getpid()}.{id(req):x}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            req.fd_ticket = self.hand(fd, WRITE)
            req.path = tmp
            rep = self.call("Export", req)
            if not overwrite and os.path.lexists(path):
                raise FileExistsError(path)
            os.replace(tmp, path)
            return rep
        finally:
            os.close(fd)
            if os.path.exists(tmp):
                os.unlink(tmp)

    def call(self, method, req, timeout=60):
        return getattr(self, "_" + method)(req, timeout=timeout, metadata=self.metadata)

    def raw(self, method, payload, timeout=30):
        """Sends payload bytes as the request of any method; returns the reply bytes."""
        f = self.channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        return f(payload, timeout=timeout, metadata=self.metadata)

    # ---- requests ----

    def request(self, encoding, qubits, values=None, dtype="complex128", input_dtype=None,
                rows=0, cols=0, policy="auto", devices=(), path=None, shm=None, ttl=0,
                label="", hand_over=True):
        r = self.pb.EncodeRequest()
        r.encoding = ENCODINGS[encoding] if isinstance(encoding, str) else encoding
        r.qubits = qubits
        r.output_dtype = DTYPES[dtype] if isinstance(dtype, str) else dtype
        r.ttl_seconds = ttl
        r.label = label
        r.placement.policy = POLICIES[policy] if isinstance(policy, str) else policy
        r.placement.devices.extend(devices)
        inp = r.input
        inp.rows = rows
        inp.cols = cols
        if values is not None:
            arr = np.ascontiguousarray(values)
            if input_dtype is None:
                input_dtype = {np.dtype(np.float32): "float32",
                               np.dtype(np.int64): "int64"}.get(arr.dtype, "float64")
            arr = arr.astype(NP_DTYPE[DTYPES[input_dtype]])
            inp.dtype = DTYPES[input_dtype]
            inp.data = arr.tobytes()
            if arr.ndim == 2 and not rows and not cols:
                inp.rows, inp.cols = arr.shape
        elif input_dtype is not None:
            inp.dtype = DTYPES[input_dtype] if isinstance(input_dtype, str) else input_dtype
        unix = self.socket_path is not None
        if path is not None:
            inp.path = path
            if hand_over and unix:
                inp.fd_ticket = self.hand_file(path)
        if shm is not None:
            inp.shm.CopyFrom(shm)
            if hand_over and unix and not shm.region and not shm.fd_ticket:
                self.hand_shm(inp.shm)
        return r

    def encode(self, *a, **kw):
        return self.call("Encode", self.request(*a, **kw)).state

    def ref(self, state, token=None):
        r = self.pb.StateRef()
        r.handle = state.handle
        r.token = state.token if token is None else token
        return r

    def fetch(self, state, offset=0, count=0, chunk_bytes=0, token=None, timeout=120):
        """The amplitudes as a complex NumPy array; checks the chunks tile the range in order."""
        req = self.pb.FetchRequest()
        req.state.CopyFrom(self.ref(state, token))
        req.offset = offset
        req.count = count
        req.chunk_bytes = chunk_bytes
        parts, nchunks, total, dtype = [], 0, None, None
        expect = offset
        for ch in self._Fetch(req, timeout=timeout, metadata=self.metadata):
            if total is None:
                total, dtype = ch.total, NP_DTYPE[ch.dtype]
            assert ch.offset == expect, (ch.offset, expect)
            a = np.frombuffer(ch.data, dtype=dtype)
            expect += a.size
            parts.append(a)
            nchunks += 1
        out = np.concatenate(parts) if parts else np.zeros(0, np.complex128)
        assert total is None or out.size == total, (out.size, total)
        self.last_fetch_chunks = nchunks
        return out

    def release(self, state, token=None):
        return self.call("Release", self.ref(state, token))

    def status(self):
        return self.call("Status", self.pb.StatusRequest())

    def upload(self, request, data, chunk=1 << 20):
        """EncodeUpload: the request (input without data), then data in chunks."""
        def chunks():
            first = self.pb.UploadChunk()
            first.request.CopyFrom(request)
            yield first
            for i in range(0, len(data), chunk):
                m = self.pb.UploadChunk()
                m.data = data[i:i + chunk]
                m.last = i + chunk >= len(data)
                yield m
            if not data:
                yield self.pb.UploadChunk(last=True)
        return self._EncodeUpload(chunks(), timeout=120, metadata=self.metadata).state

    def error_detail(self, err):
        """The ErrorDetail of a failed call's trailing metadata "qdp-error-bin", or None."""
        for k, v in err.trailing_metadata() or ():
            if k == "qdp-error-bin":
                return self.pb.ErrorDetail.FromString(v)
        return None
