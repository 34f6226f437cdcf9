/*
** Private declarations of the encrypted standby (docs/FORMAT.md "Standby"):
**
**   spool.c    the primary's ship spool DB-tdeship: committed WAL
**              transactions captured as ciphertext, in order, with a
**              sequence number; the capture itself (shared by the shipper
**              and the shim's WAL hook); the page-apply routine (shared by
**              the standby and the shipper's base copy);
**   state.c    the state files both sides keep for monitoring and restart
**              (DB-tdeship-state, DB-tdestandby) and the status reader;
**   net.c      the wire protocol: checksummed messages over TCP, deadlines;
**   tls.c      the repl_* configuration and mutual TLS;
**   ship.c     tde_ship_run_v2: capture cycles and one sender per standby;
**   standby.c  tde_standby_run_v2, tde_standby_promote: receive, apply, promote.
**
** Nothing here ever needs a data key or a keystore: pages and frames are
** copied as the ciphertext they are.  Must never: apply a partial
** transaction, apply a transaction of another database, lose a committed
** frame the shipper has not captured.
*/
#ifndef TDE_REPL_H
#define TDE_REPL_H

#include "tde_int.h"
#include "keys/layout.h"

#include <sys/types.h>

#define TDE_WAL_HDR     32
#define TDE_FRAME_HDR   24

/* ---- spool records (docs/FORMAT.md "Ship spool") ------------------------ */

#define TDE_SPOOL_MAGIC     "TDESHIP1"
#define TDE_SPOOL_HDR       96          /* magic, dbid, history id, reserved, SHA-256 */
#define TDE_REC_MAGIC       "TDESREC1"
#define TDE_REC_HDR         96
#define TDE_REC_SUM         32

#define TDE_REC_TXN   1     /* a committed transaction (frames up to the commit frame) */
#define TDE_REC_MARK  2     /* capture position only; never shipped, no sequence number */
#define TDE_REC_GAP   3     /* frames were lost: a standby behind this must take a base copy */

#define TDE_RECF_HEADER  0x01   /* payload starts with the 8 KiB header region */
#define TDE_RECF_CLOSED  0x02   /* MARK: the WAL generation ended (truncated/deleted) */
#define TDE_RECF_REWIND  0x04   /* GAP: the primary lost commits; iFirst = frames lost, an
                                ** upper bound on the transactions before it that are gone */

/* Decoded record header. */
typedef struct TdeRec {
  uint64_t seq;
  uint8_t kind, flags;
  uint32_t pgsz;
  uint8_t aSalt[8];           /* WAL generation of the frames */
  uint32_t nCkpt;             /* WAL header checkpoint sequence */
  uint32_t iFirst, iLast;     /* frame range; iLast = position after the record */
  uint32_t nFrame;
  uint64_t tCapture;          /* ms since the epoch */
  uint8_t aHdrHash[32];       /* SHA-256 of the header region in force after it */
  uint32_t nPayload;
  uint32_t keySig;            /* data-key versions of that header (0: unknown) */
} TdeRec;

/* Capture position: where the spool ends in the WAL. */
typedef struct TdeSpoolPos {
  uint64_t seq;               /* last sequence number used (0: none) */
  uint8_t aSalt[8];
  uint32_t nCkpt;
  uint32_t iFrame;            /* last captured frame of that generation */
  int bClosed;                /* that generation ended: any other is new */
  int bValid;                 /* a record exists */
  uint8_t aHdrHash[32];
  uint32_t keySig;            /* data-key versions the header lists (see tdeKeySig) */
  /* The stored frame header of frame iFrame as captured (bLastFh 1), so a
  ** capture can tell that the WAL still holds that very frame: a primary
  ** that lost commits and wrote past the old end again in the same
  ** generation has another frame there (its checksum covers every frame
  ** before it).  bLastFh 2: at spool offset iLastFhOff, not read yet. */
  int bLastFh;
  uint8_t aLastFh[TDE_FRAME_HDR];
  sqlite3_int64 iLastFhOff;
} TdeSpoolPos;

typedef struct TdeSpool {
  int fd;
  char *zPath;
  uint8_t aDbid[16];
  uint8_t aHistory[16];       /* random per spool: sequence numbers are per history */
  sqlite3_int64 iEnd;         /* end of the valid records */
  TdeSpoolPos pos;
  uint64_t firstSeq;          /* smallest TXN/GAP sequence in the file (0: none) */
  ino_t ino;
  /* Called for every record scanned or appended (r NULL: the file was
  ** replaced and the records seen so far are gone); aSum: the record's
  ** SHA-256 trailer (NULL for MARK records or if unreadable). */
  void (*xOnRec)(void *pArg, const TdeRec *r, sqlite3_int64 iOff, size_t n, const uint8_t *aSum);
  void *pOnRecArg;
} TdeSpool;

/* Largest record payload a reader takes (a TXN message must fit in
** TDE_MSG_MAX).  The capture never writes a larger record: a transaction
** above tdeShipMaxRecord() becomes a GAP (standbys take a base copy).
** tdeShipMaxRecord() is this limit, or lower when the environment variable
** TDE_SHIP_MAX_RECORD says so: for tests only. */
#define TDE_REC_PAYLOAD_MAX  (TDE_MSG_MAX - 1024)
uint32_t tdeShipMaxRecord(void);

/* Encode/decode a record header (TDE_REC_HDR bytes).  Decode does not
** bound the payload size (see TDE_REC_PAYLOAD_MAX); tdeRecCheck does. */
void tdeRecEncode(const TdeRec *r, uint8_t *a);
int tdeRecDecode(const uint8_t *a, TdeRec *r);
/* Check a whole record (header, payload, checksum) of n bytes. */
int tdeRecCheck(const uint8_t *a, size_t n, TdeRec *r);

/* Open DB-tdeship.  bCreate: create it (with aDbid, a new history id) if
** missing.  TDE_NOTFOUND if missing and !bCreate.  The caller serialises
** writers (SQLite's WAL write lock or exclusive lock). */
int tdeSpoolOpen(const char *zDb, int bCreate, const uint8_t *aDbid, TdeSpool **pp);
void tdeSpoolClose(TdeSpool *s);
/* Read records from the last known end; bRepair: cut a torn tail.
** Reopens the file if it was replaced (trimmed). */
int tdeSpoolScan(TdeSpool *s, int bRepair);
/* Append one record; payload nPayload bytes (r->nPayload set here). */
int tdeSpoolAppend(TdeSpool *s, TdeRec *r, const uint8_t *aPayload);
int tdeSpoolSync(TdeSpool *s);
/* Read the whole record at iOff into *ppRec (sqlite3_malloc'd), *pn its
** size.  TDE_FORMAT if damaged or torn. */
int tdeSpoolRead(TdeSpool *s, sqlite3_int64 iOff, TdeRec *r, uint8_t **ppRec, size_t *pn);
/* Rewrite the spool keeping records with seq > keepAfter and the last
** record (the position).  Caller serialises as for appends. */
int tdeSpoolTrim(TdeSpool *s, uint64_t keepAfter);

/* A source of raw WAL bytes: an sqlite3_file below the shim, or an fd. */
typedef struct TdeRawSrc {
  sqlite3_file *pFile;
  int fd;
} TdeRawSrc;
int tdeRawRead(const TdeRawSrc *src, void *z, int n, sqlite3_int64 iOff, int *pbShort);

/* What SQLite's WAL index says is committed, if known. */
typedef struct TdeWalEnd {
  int bKnown;
  uint8_t aSalt[8];
  uint32_t mxFrame;
} TdeWalEnd;

/* Why the capture runs. */
#define TDE_CAPTURE_CYCLE     0   /* shipper cycle or WAL truncated to >= a header */
#define TDE_CAPTURE_RESTART   1   /* a new WAL header (aNewHdr) is about to be written */
#define TDE_CAPTURE_CLOSE     2   /* the WAL is truncated to nothing or deleted */

/*
** Copy the committed frames of the WAL that the spool does not hold yet
** into it, one TXN record per transaction, then (RESTART/CLOSE) a MARK for
** the new position.  pHdrSrc, if not NULL, reads the database's header
** region, included in the first record when it changed.  Caller holds
** SQLite's WAL write lock (or the exclusive lock).  *pnNew: records added.
*/
int tdeSpoolCapture(TdeSpool *s, const TdeRawSrc *pWal, const TdeWalEnd *aEnd, int nEnd,
                    const TdeRawSrc *pHdrSrc, int eWhy, const uint8_t *aNewHdr, int *pnNew);

/* Shim hook (wal.c, vfs.c): when DB-tdeship exists, capture before the WAL
** is restarted, truncated or deleted.  Never uses a key.  aEnd: what the
** WAL index says (the live index, the one seen when the write lock was
** taken); the first whose salts match the WAL's is used, else the last
** commit frame found.  Always returns SQLITE_OK: a spool it cannot use
** (damaged, EACCES, ENOSPC) is logged (once per cause) and never fails the
** user's operation; the shipper then finds the generation missed and
** records a GAP, so standbys take a base copy. */
int tdeShipHook(const char *zDb, const TdeRawSrc *pWal, const TdeWalEnd *aEnd, int nEnd,
                const TdeRawSrc *pHdrSrc, int eWhy, const uint8_t *aNewHdr);
/* Read the WAL index header (two 48-byte copies) from a mapped region or
** raw bytes: *pEnd gets mxFrame and salts if the copies agree. */
void tdeShmHeaderEnd(const volatile void *pShm, TdeWalEnd *pEnd);

/*
** Apply one TXN record's frames (and header region) to the database copy
** open as fd, in the layout of the header region it applies under (the
** record's own, else the copy's: tdeCopyLayout): each page at its offset,
** then truncate to the commit frame's size.  Idempotent.  No sync.
*/
int tdeApplyRecord(int fd, const uint8_t *aRec, const TdeRec *r);

/* The layout of the database copy open as fd: the one its own header
** region names (tdeHeaderLayout), page size pgsz (0: not known).
** TDE_FORMAT if the region is short or does not parse. */
int tdeCopyLayout(int fd, uint32_t pgsz, TdeLayout *pL);

/* The size in SQLite bytes of a copy of nPhys bytes with layout L, before
** record r is applied (what tdeRecValidate's nCopyPages counts).  With the
** page size not known (L->pgsz 0), a TXN with frames brings it: it must
** cut no page of the copy (tdeLayoutWhole), TDE_FORMAT otherwise; until
** then version 3's count is 0 and version 2's is in bytes. */
int tdeCopyBytes(const TdeLayout *L, int64_t nPhys, const TdeRec *r, uint64_t *pnBytes);

/*
** Check a whole record (already through tdeRecCheck) before any of it is
** logged or applied to a copy of database aDbid whose page size is
** pgszCopy (0: not known yet) and which holds nCopyPages pages: a TXN's
** frames have the copy's page size and the record's salts, only the last
** is a commit frame, its database size is in 1..nCopyPages+nFrame+1 (the
** lock-byte page is never written) and so
** is every page number; a header region parses and names aDbid.  GAP and
** MARK records carry nothing.  TDE_FORMAT with a message naming the fault.
*/
int tdeRecValidate(const uint8_t *aRec, const TdeRec *r, uint32_t pgszCopy, uint64_t nCopyPages,
                   const uint8_t *aDbid);

/* ---- files ------------------------------------------------------------- */

/* Write zData to zPath atomically: temp file, fsync, rename, fsync dir. */
int tdeWriteFileAtomic(const char *zPath, const char *zData, size_t n, int bSync);
/* Whole file into a sqlite3_malloc'd NUL-terminated buffer. */
int tdeReadFileAll(const char *zPath, char **pz, size_t *pn);
int tdeFsyncDir(const char *zPath);
uint64_t tdeNowMs(void);
void tdeHex(const uint8_t *a, size_t n, char *zOut);
int tdeUnhex(const char *z, uint8_t *a, size_t n);

/* ---- state files (state.c) ---------------------------------------------- */

/* Key=value text with a trailing "sha256=" line over what precedes it. */
typedef struct TdeKv TdeKv;
TdeKv *tdeKvNew(void);
void tdeKvFree(TdeKv*);
void tdeKvSet(TdeKv*, const char *zKey, const char *zFmt, ...) __attribute__((format(printf, 3, 4)));
const char *tdeKvGet(const TdeKv*, const char *zKey);
int64_t tdeKvInt(const TdeKv*, const char *zKey);
int tdeKvWrite(TdeKv*, const char *zPath, const char *zMagic, int bSync);
int tdeKvRead(const char *zPath, const char *zMagic, TdeKv **pp);

#define TDE_SHIP_STATE_MAGIC    "sqlite-tde-ship 1"
#define TDE_STANDBY_STATE_MAGIC "sqlite-tde-standby 1"

/* Replication status of database zDb as its state files describe it. */
typedef tde_repl_info TdeReplStatus;
int tdeReplStatusRead(const char *zDb, TdeReplStatus *p);

/* Does a standby state file exist next to zDb, naming database id aDbid
** (the 16 bytes at offset 20 of zDb, read by the caller through the handle
** it holds; 0: the file has none yet)?  The shim then serves it read-only.
** *pSeq gets its applied sequence.  Never opens zDb itself (POSIX locks). */
int tdeStandbyIsCopy(const char *zDb, const uint8_t *aDbid, uint64_t *pSeq);

/* ---- wire (net.c) ------------------------------------------------------ */

#define TDE_MSG_HELLO       1
#define TDE_MSG_HELLO_OK    2
#define TDE_MSG_REFUSE      3
#define TDE_MSG_TXN         4
#define TDE_MSG_ACK         5
#define TDE_MSG_RESEND      6
#define TDE_MSG_BASE_BEGIN  7
#define TDE_MSG_BASE_DATA   8
#define TDE_MSG_BASE_END    9
#define TDE_MSG_HEARTBEAT  10
#define TDE_MSG_MAX        (64u*1024*1024 + 1024)
#define TDE_WIRE_MAGIC     "TDEWIRE1"

int tdeNetParseAddr(const char *zAddr, char *zHost, size_t nHost, int *pPort);
int tdeNetListen(const char *zAddr, int *pFd);
int tdeNetConnect(const char *zAddr, int timeoutMs, int *pFd);
/* Is fd readable within timeoutMs? */
int tdeNetReadable(int fd, int timeoutMs);
/* Non-blocking, keepalive, no delay on a connected socket. */
void tdeNetTune(int fd);
/* Wait until fd is ready for ev (POLLIN/POLLOUT) or the deadline (ms since
** the epoch) passes: 1 ready, 0 timed out. */
int tdeNetWait(int fd, short ev, uint64_t deadline);
/* The OpenSSL error queue as one line into zOut (zDefault if empty). */
void tdeSslWhy(char *zOut, size_t nOut, const char *zDefault);

/* Deadlines: a message must arrive (or leave) whole within
** TDE_NET_MSG_MS plus one second per TDE_NET_MIN_RATE bytes. */
#define TDE_NET_MSG_MS     30000
#define TDE_NET_MIN_RATE   (256*1024)

/* One connection: a non-blocking socket, inside TLS unless insecure. */
typedef struct TdeConn {
  int fd;
  struct ssl_st *pSsl;        /* NULL: plaintext (--insecure-no-tls) */
  char zPeerId[256];          /* subject of the peer's certificate ("" without TLS) */
} TdeConn;
void tdeConnOpen(TdeConn *c, int fd);
/* Close (TLS close_notify, not waited for) and forget; safe twice. */
void tdeConnClose(TdeConn *c);
/* Send one message: type(1) length(4) body SHA-256(type||length||body). */
int tdeConnSend(TdeConn *c, int eType, const uint8_t *a1, size_t n1, const uint8_t *a2, size_t n2);
/* Receive one message into *ppBody (sqlite3_malloc'd).  timeoutMs < 0:
** wait for its first byte without limit; then the whole message must
** arrive by its deadline.  TDE_NOTFOUND when no byte came within
** timeoutMs, TDE_IO on a closed, broken or too slow connection, TDE_AUTH
** on a bad checksum. */
int tdeConnRecv(TdeConn *c, int timeoutMs, int *peType, uint8_t **ppBody, size_t *pn);
/* The same with an overall deadline (ms since the epoch; 0: none). */
int tdeConnRecvBy(TdeConn *c, int timeoutMs, uint64_t deadline, int *peType, uint8_t **ppBody, size_t *pn);
/* Is a byte (or a buffered TLS record) ready within timeoutMs? */
int tdeConnReadable(TdeConn *c, int timeoutMs);
/* "TLSv1.3", or "plaintext". */
const char *tdeConnProto(const TdeConn *c);

/* ---- transport security (tls.c) ------------------------------------------ */

#define TDE_REPL_MAX_PINS  4
#define TDE_MAX_PUBKEYS    2          /* repl_primary_pubkey: the key and its successor */

/* The replication configuration file (README "Standby", repl_* keys). */
typedef struct TdeReplCfg {
  unsigned flags;             /* TDE_REPL_* of include/sqlite-tde.h */
  int bInsecure;              /* --insecure-no-tls: plaintext, no peer check */
  char zPath[4096];
  char zCa[4096], zCert[4096], zKey[4096];
  char zAudit[4096];          /* repl_audit_log ("" : next to the database) */
  char zPeerName[256];        /* the name the peer's certificate must carry */
  int nPin;                   /* pinned SHA-256 of the peer's SubjectPublicKeyInfo */
  uint8_t aPin[TDE_REPL_MAX_PINS][32];
  int timeoutMs;              /* handshake deadline (default 10000) */
  char zSignKey[4096];        /* primary: repl_sign_key ("" none) */
  int nPubKey;                /* standby: repl_primary_pubkey, pinned */
  struct evp_pkey_st *apPubKey[TDE_MAX_PUBKEYS];
  struct evp_pkey_st *pSignKey;
  int bSync;                  /* primary: repl_mode = sync */
  int syncTimeoutMs;          /* repl_sync_timeout_ms (default 2000) */
  int bPrimaryDbid;           /* standby: the only database it accepts */
  uint8_t aPrimaryDbid[16];
  struct ssl_ctx_st *pCtx;
} TdeReplCfg;

/* Load zPath (NULL: none; then flags must hold TDE_REPL_INSECURE_NO_TLS)
** and make the TLS context of a server (the standby) or a client.  The
** key file must not be accessible by group or others.  *pp owned by the
** caller: tdeReplCfgFree. */
int tdeReplCfgLoad(const char *zPath, unsigned flags, int bServer, TdeReplCfg **pp);
void tdeReplCfgFree(TdeReplCfg *p);
/* Handshake on a connected c (nothing when insecure) within p->timeoutMs,
** check the peer's certificate chain, name and pins.  zHost: the name
** the standby's certificate must carry unless repl_peer_name says
** otherwise.  On failure zWhy says why (for the log, never a secret). */
int tdeTlsClient(const TdeReplCfg *p, TdeConn *c, const char *zHost, char *zWhy, size_t nWhy);
int tdeTlsServer(const TdeReplCfg *p, TdeConn *c, char *zWhy, size_t nWhy);

/* ---- protection mode sync (sync.c) ---------------------------------------- */

#define TDE_SYNC_BYTES      40
#define TDE_SYNC_MODE_SYNC  1
/* Shim: after a commit (the WAL write lock released with the WAL index at
** pMine), wait until a standby acknowledged it, when a shipper runs in sync
** mode; else return at once.  Never fails the commit.  *pNoFileUntil (per
** connection, 0 at first): a monotonic time before which the connection
** knows there is no DB-tdeship-sync (set when the open finds none; a
** shipper waits TDE_SYNC_RECHECK_US after creating the file, so every
** commit after its start sees the file). */
#define TDE_SYNC_RECHECK_US 20000
/* The longest a commit waits, whatever DB-tdeship-sync says: the largest
** repl_sync_timeout_ms the configuration accepts (tls.c). */
#define TDE_SYNC_MAX_WAIT_MS 600000u
void tdeReplSyncWait(const char *zDb, const TdeWalEnd *pMine, uint64_t *pNoFileUntil);

/* The replication state of one main database handle of the shim, set and
** read by the shim's replication hooks (vfs/vfs.c: the standby copy's
** open, reads and write refusal, tdeShmLock's capture and sync wait;
** vfs/wal.c: the capture before a restart). */
typedef struct TdeReplFile {
  int bStandby;               /* a standby copy (DB-tdestandby exists): read-only,
                              ** page 1 shown in rollback mode (repl/standby.c) */
  uint64_t standbyDev, standbyIno; /* standby copy: the file opened (a base copy replaces it) */
  TdeWalEnd shipEnd;          /* WAL index end when this connection last took
                              ** the WAL write lock (standby hook, repl/spool.c) */
  TdeWalEnd syncEnd;          /* the end this connection's commit left, while
                              ** its sync wait is due (db/capture.c) */
  uint64_t syncNoFileUntil;   /* no DB-tdeship-sync before this monotonic time (repl/sync.c) */
} TdeReplFile;
int tdeSyncCovers(const uint8_t *aAckSalt, uint32_t ackLast, const uint8_t *aSalt, uint32_t mxFrame);
/* Shipper: create DB-tdeship-sync; publish the acknowledged position; remove. */
int tdeSyncCreate(const char *zDb, uint32_t timeoutMs, int *pFd);
void tdeSyncPublish(int fd, int bDegraded, const uint8_t *aSalt, uint32_t iLast, int bValid);
void tdeSyncRemove(const char *zDb, int fd);

/* ---- destinations other than a standby (ship.c) ---------------------------- */

/*
** A destination the shipper feeds from its one spool besides the standbys
** (the archive, src/archive/archive.c; src/repl never calls that folder
** otherwise).  The shipper runs xRun in a thread of its own; xRun reads
** records and makes base copies through its link (below) and acknowledges
** what it stored durably: the spool is trimmed only below what every
** destination acknowledged, unless the spool grew past nMaxSpool bytes
** (0: no bound), when this destination is left behind (it then needs a
** base copy).  xRun returns when tdeShipLinkStopped says so.
*/
typedef struct TdeShipLink TdeShipLink;
typedef struct TdeShipDest {
  int iVersion;               /* 1 */
  const char *zName;          /* its "address" in the state file and the log */
  uint64_t nMaxSpool;
  void *pArg;
  int (*xRun)(TdeShipLink *pLink, void *pArg);
} TdeShipDest;

/* tde_ship_run_v2 with destinations (nTo may be 0 when nDest > 0: then no
** replication configuration is needed) and a signing key file zSignKey
** (NULL: repl_sign_key of the configuration, if any). */
int tdeShipRun(const char *zDb, const char *zConfig, const char *zReplConfig, const char *zSignKey,
               unsigned flags, const char *const *azTo, int nTo, const TdeShipDest *const *apDest, int nDest,
               int nCycleMs, volatile int *pbStop);

int tdeShipLinkStopped(TdeShipLink *l);
const char *tdeShipLinkDb(TdeShipLink *l);
/* Database id, history id of the spool, the signing key (NULL: none). */
void tdeShipLinkIds(TdeShipLink *l, uint8_t *aDbid, uint8_t *aHistory, struct evp_pkey_st **ppSignKey);
/* Read what the spool gained: *pFirst its first TXN/GAP sequence (0:
** none), *pDurable the last one synced (sendable), *pCaptureMs the capture
** time of that one. */
int tdeShipLinkScan(TdeShipLink *l, uint64_t *pFirst, uint64_t *pDurable, uint64_t *pCaptureMs);
/* Record seq whole (checked, sqlite3_malloc'd *ppRec) and the chain before
** and after it.  TDE_NOTFOUND when the spool no longer holds it or its
** chain is unknown (a base copy is needed); TDE_FORMAT when damaged. */
int tdeShipLinkRecord(TdeShipLink *l, uint64_t seq, TdeRec *r, uint8_t **ppRec, size_t *pnRec,
                      uint8_t *aChainBefore, uint8_t *aChainAfter);
/* A base copy into the file zTmp (created 0600), consistent with record
** *pSeq (synced), captured at *pCaptureMs, the chain there in aChain. */
int tdeShipLinkBase(TdeShipLink *l, const char *zTmp, uint64_t *pSeq, uint64_t *pCaptureMs, uint8_t *aChain);
/* The destination holds records up to seq durably. */
void tdeShipLinkAck(TdeShipLink *l, uint64_t seq);
/* Its state ("streaming", "unreachable", ...) and last error (NULL: keep,
** "": none), shown in DB-tdeship-state and the status. */
void tdeShipLinkState(TdeShipLink *l, const char *zState, const char *zError);
/* One line in the shipper's audit log. */
void tdeShipLinkAudit(TdeShipLink *l, const char *zOp, const char *zDetail);

/* ---- record chain and signatures (sign.c) -------------------------------- */

struct evp_pkey_st;
#define TDE_SIG_BYTES     64
#define TDE_HEAD_BYTES    (88 + TDE_SIG_BYTES)
#define TDE_BASE_SIGNED   128           /* bytes a base copy's signature covers */
#define TDE_MSG_HEAD      11            /* primary -> standby: a signed chain head */

void tdeChainAnchor(const uint8_t *aHistory, uint64_t seq, uint8_t *aOut);
void tdeChainNext(const uint8_t *aPrev, const uint8_t *aSum, uint8_t *aOut);
int tdeSignKeyLoad(const char *zPath, struct evp_pkey_st **pp);
int tdePubKeyLoad(const char *zPath, struct evp_pkey_st **pp);
/* Hex SHA-256 of the raw Ed25519 public key (65 bytes). */
int tdeKeyFingerprint(struct evp_pkey_st *k, char *zHex);
int tdeSign(struct evp_pkey_st *k, const uint8_t *a, size_t n, uint8_t *aSig);
int tdeVerify(struct evp_pkey_st *const *aKey, int nKey, const uint8_t *a, size_t n, const uint8_t *aSig);
/* A signed head (TDE_HEAD_BYTES) into aOut; checked with the pinned keys,
** the database id and history expected. */
int tdeHeadMake(struct evp_pkey_st *k, const uint8_t *aDbid, const uint8_t *aHistory, uint64_t seq,
                const uint8_t *aChain, uint8_t *aOut);
int tdeHeadCheck(struct evp_pkey_st *const *aKey, int nKey, const uint8_t *a, size_t n, const uint8_t *aDbid,
                 const uint8_t *aHistory, uint64_t *pSeq, uint8_t *aChain);
/* The TDE_BASE_SIGNED bytes a base copy's signature covers. */
void tdeBaseSigned(const uint8_t *aDbid, const uint8_t *aHistory, uint64_t seq, uint64_t size, const uint8_t *aSum,
                   const uint8_t *aChain, uint64_t tCap, uint8_t *aOut);

#endif /* TDE_REPL_H */
