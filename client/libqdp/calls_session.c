/* calls_session.c — sessions (qdp.h, since 0.7; proto OpenSession): what a client makes naming
 * one is released when it ends. */
#include <stdio.h>
#include <string.h>

#include "libqdp_int.h"
#include "qdp.pb-c.h"

#define M_OPEN_SESSION "/qdp.Qdp/OpenSession"
#define M_HEARTBEAT "/qdp.Qdp/Heartbeat"
#define M_CLOSE_SESSION "/qdp.Qdp/CloseSession"

static qdp_status check_id(qdp_client *c, const char *id) {
  if (!c || !id || !*id) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, c ? "session" : "client",
                          "A session call needs a client and a session id.");
  }
  return QDP_OK;
}

qdp_status qdp_session_open(qdp_client *c, uint64_t heartbeat_ms, const char *label,
                            char *ret_id) {
  qdp__err_reset();
  if (!c || !ret_id) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, c ? "ret_id" : "client",
                          "qdp_session_open needs a client and room for the id.");
  }
  Qdp__OpenSessionRequest req = QDP__OPEN_SESSION_REQUEST__INIT;
  req.heartbeat_ms = heartbeat_ms;
  req.label = (char *)(label ? label : "");
  Qdp__SessionInfo *rep = NULL;
  qdp_status rc = qdp__unary(c, M_OPEN_SESSION, &req.base, &qdp__session_info__descriptor,
                             (ProtobufCMessage **)&rep);
  if (rc == QDP_OK && strlen(rep->session) >= QDP_SESSION_ID_LEN) {
    rc = qdp__err_local(QDP_ERR_INTERNAL, -1, "session",
                        "qdpd answered a session id of %zu B; at most %d B expected.",
                        strlen(rep->session), QDP_SESSION_ID_LEN - 1);
  }
  if (rc == QDP_OK) {
    snprintf(ret_id, QDP_SESSION_ID_LEN, "%s", rep->session);
  }
  if (rep) {
    qdp__session_info__free_unpacked(rep, NULL);
  }
  return rc;
}

/* A call on session id (SessionRef) whose reply is of `desc`, into *ret_rep. */
static qdp_status session_call(qdp_client *c, const char *method, const char *id,
                               const ProtobufCMessageDescriptor *desc, ProtobufCMessage **ret_rep) {
  qdp__err_reset();
  qdp_status rc = check_id(c, id);
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__SessionRef req = QDP__SESSION_REF__INIT;
  req.session = (char *)id;
  return qdp__unary(c, method, &req.base, desc, ret_rep);
}

qdp_status qdp_session_heartbeat(qdp_client *c, const char *id) {
  Qdp__SessionInfo *rep = NULL;
  qdp_status rc = session_call(c, M_HEARTBEAT, id, &qdp__session_info__descriptor,
                               (ProtobufCMessage **)&rep);
  if (rep) {
    qdp__session_info__free_unpacked(rep, NULL);
  }
  return rc;
}

qdp_status qdp_session_close(qdp_client *c, const char *id, uint32_t *ret_states,
                             uint64_t *ret_freed_bytes) {
  Qdp__CloseSessionReply *rep = NULL;
  qdp_status rc = session_call(c, M_CLOSE_SESSION, id, &qdp__close_session_reply__descriptor,
                               (ProtobufCMessage **)&rep);
  if (rc == QDP_OK) {
    if (ret_states) {
      *ret_states = rep->states;
    }
    if (ret_freed_bytes) {
      *ret_freed_bytes = rep->freed_bytes;
    }
  }
  if (rep) {
    qdp__close_session_reply__free_unpacked(rep, NULL);
  }
  return rc;
}
