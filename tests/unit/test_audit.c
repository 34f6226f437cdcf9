/*
** Unit tests for the audit trail (src/keys/audit.c) and the key operations
** that emit it (registry open/close, wallet create / new key / retire, the
** public tde_keystore_new_key and tde_keystore_retire): exact line format
** and escaping, omitted fields, the timestamp, relative paths, file mode,
** a log rotated away, a log that cannot be written (one warning, caller's
** error untouched), four processes appending at once (every line valid
** JSON, checked by /usr/bin/python3), and a full keystore flow whose log
** holds the expected operations in order and no secrets.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tde_int.h"
#include "config.h"
#include "audit/audit.h"

static char zScratch[1024];

/* Warnings that name an audit log, and any ERROR-level line. */
static int nAuditWarn;
static int nErrorLog;
static char zFirstErrorLog[512];
static void countLog(void *pArg, int level, const char *zMsg){
  (void)pArg;
  if( level==TDE_LOG_WARNING && strstr(zMsg, "audit log") ) nAuditWarn++;
  if( level==TDE_LOG_ERROR && nErrorLog++==0 ){
    snprintf(zFirstErrorLog, sizeof(zFirstErrorLog), "%s", zMsg);
  }
}

static int rmOne(const char *zPath, const struct stat *pSt, int flag, struct FTW *pFtw){
  (void)pSt; (void)flag; (void)pFtw;
  return remove(zPath);
}

static int setupScratch(void **state){
  const char *zTmp = getenv("TDE_TEST_TMP");
  (void)state;
  tde_set_log(countLog, 0);
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "/tmp";
  mkdir(zTmp, 0700);
  snprintf(zScratch, sizeof(zScratch), "%s/tdeaud-XXXXXX", zTmp);
  if( mkdtemp(zScratch)==0 ) return -1;
  return 0;
}

/* TDE_TEST_KEEP=1 keeps the scratch directory (and its logs) to look at. */
static int teardownScratch(void **state){
  const char *zKeep = getenv("TDE_TEST_KEEP");
  if( zKeep==0 ) zKeep = getenv("TDE_KEEP_SCRATCH");   /* make test: scan-secrets.sh */
  (void)state;
  if( zKeep && zKeep[0]=='1' ){
    printf("# kept %s\n", zScratch);
    return 0;
  }
  nftw(zScratch, rmOne, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

static void scratchPath(const char *zName, char *zOut){
  snprintf(zOut, PATH_MAX, "%s/%s", zScratch, zName);
}

static void writeText(const char *zName, const char *zText, mode_t mode){
  char zPath[PATH_MAX];
  FILE *f;
  scratchPath(zName, zPath);
  unlink(zPath);
  f = fopen(zPath, "w");
  assert_non_null(f);
  assert_true(fputs(zText, f) >= 0);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(zPath, mode), 0);
}

/* Whole file, NUL-terminated; NULL if it does not exist. */
static char *readText(const char *zPath, size_t *pn){
  FILE *f = fopen(zPath, "rb");
  char *z;
  long n;
  if( f==0 ) return 0;
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  z = malloc((size_t)n + 1);
  assert_non_null(z);
  assert_int_equal(fread(z, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  z[n] = 0;
  if( pn ) *pn = (size_t)n;
  return z;
}

static int countLines(const char *z){
  int n = 0;
  for(; *z; z++) n += *z=='\n';
  return n;
}

static void expectRc(int rc, int want){
  if( rc!=want ) fail_msg("rc=%d (want %d): %s", rc, want, tde_last_error());
}

/* A config held in memory whose relative paths resolve in the scratch dir. */
static TdeConfig *memConfig(const char *zExtra){
  char zText[2048];
  TdeConfig *p = 0;
  snprintf(zText, sizeof(zText), "keystore = wallet\nwallet = x.wallet\n%s", zExtra);
  if( tdeConfigParse(zText, "mem.conf", zScratch, &p)!=TDE_OK ){
    fail_msg("config: %s", tde_last_error());
  }
  return p;
}

/* ---- format ---------------------------------------------------------------- */

/* Every field, and a detail with quotes, a backslash, a newline, control
** characters, DEL, well-formed UTF-8 (2, 3 and 4 bytes) and malformed
** UTF-8 (stray byte, overlong form, surrogate, truncated sequence). */
static void test_format_known_answer(void **state){
  static const uint8_t aDbid[16] = {0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15};
  static const char zDetail[] =
    "say \"hi\" \\ back\nslash\x01\x1f\x7f caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"
    " \xff\xc0\xaf \xed\xa0\x80 end\xe2\x82";
  static const char zWant[] =
    "{\"ts\":\"2026-11-30T06:20:00.123Z\",\"op\":\"dek_unwrap\",\"outcome\":\"success\","
    "\"pid\":1234,\"db_path\":\"/var/db/app \\\"x\\\".db\","
    "\"db_id\":\"000102030405060708090a0b0c0d0e0f\",\"keystore\":\"wallet\","
    "\"key_id\":\"wallet-0123\",\"new_key_id\":\"wallet-4567\",\"key_version\":1,"
    "\"new_key_version\":2,\"pages\":1000,"
    "\"detail\":\"say \\\"hi\\\" \\\\ back\\u000aslash\\u0001\\u001f\\u007f "
    "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\ufffd\\ufffd\\ufffd "
    "\\ufffd\\ufffd\\ufffd end\\ufffd\\ufffd\"}\n";
  TdeAuditRec r;
  char z[1024];
  int n;
  (void)state;

  tdeAuditInit(&r, "dek_unwrap");
  r.zDbPath = "/var/db/app \"x\".db";
  r.aDbid = aDbid;
  r.zKeystore = "wallet";
  r.zKeyId = "wallet-0123";
  r.zNewKeyId = "wallet-4567";
  r.keyVersion = 1;
  r.newKeyVersion = 2;
  r.nPages = 1000;
  r.zDetail = zDetail;
  n = tdeAuditFormat(&r, INT64_C(1796019600123), 1234, z, sizeof(z));
  assert_string_equal(z, zWant);
  assert_int_equal(n, (int)strlen(zWant));

  /* Exactly enough room: the length plus the NUL; one less is -1. */
  assert_int_equal(tdeAuditFormat(&r, INT64_C(1796019600123), 1234, z, (size_t)n+1), n);
  assert_string_equal(z, zWant);
  assert_int_equal(tdeAuditFormat(&r, INT64_C(1796019600123), 1234, z, (size_t)n), -1);
  assert_int_equal(tdeAuditFormat(&r, INT64_C(1796019600123), 1234, z, 10), -1);
  assert_int_equal(tdeAuditFormat(&r, INT64_C(1796019600123), 1234, 0, 0), -1);
}

/* Absent fields are left out; zero pages is a value, not absence; a
** failure says so; times before 1970 and leap days format correctly. */
static void test_format_omission(void **state){
  TdeAuditRec r;
  char z[512];
  (void)state;

  tdeAuditInit(&r, "keystore_open");
  assert_int_equal(r.nPages, -1);
  r.bFailure = 1;
  assert_true(tdeAuditFormat(&r, 0, 1, z, sizeof(z)) > 0);
  assert_string_equal(z, "{\"ts\":\"1970-01-01T00:00:00.000Z\",\"op\":\"keystore_open\","
                         "\"outcome\":\"failure\",\"pid\":1}\n");

  tdeAuditInit(&r, "rekey_progress");
  r.nPages = 0;
  r.zDetail = "";
  assert_true(tdeAuditFormat(&r, -1, 7, z, sizeof(z)) > 0);
  assert_string_equal(z, "{\"ts\":\"1969-12-31T23:59:59.999Z\",\"op\":\"rekey_progress\","
                         "\"outcome\":\"success\",\"pid\":7,\"pages\":0,\"detail\":\"\"}\n");

  tdeAuditInit(&r, "header_rewrap");
  r.keyVersion = 3;
  r.zNewKeyId = "k2";
  assert_true(tdeAuditFormat(&r, INT64_C(951782400007), 99, z, sizeof(z)) > 0);
  assert_string_equal(z, "{\"ts\":\"2000-02-29T00:00:00.007Z\",\"op\":\"header_rewrap\","
                         "\"outcome\":\"success\",\"pid\":99,\"new_key_id\":\"k2\","
                         "\"key_version\":3}\n");

  /* No operation: nothing to record. */
  tdeAuditInit(&r, 0);
  assert_int_equal(tdeAuditFormat(&r, 0, 1, z, sizeof(z)), -1);
  assert_int_equal(tdeAuditFormat(0, 0, 1, z, sizeof(z)), -1);
}

/* ---- writing --------------------------------------------------------------- */

static int isDigits(const char *z, int n){
  int i;
  for(i=0; i<n; i++) if( z[i]<'0' || z[i]>'9' ) return 0;
  return 1;
}

/* A real line: relative audit_log resolved against the config's directory,
** created 0600 whatever the umask, timestamp shaped YYYY-MM-DDTHH:MM:SS.mmmZ
** and close to now, our pid, one line per call, and a log rotated away is
** recreated rather than written through a stale descriptor. */
static void test_write_line(void **state){
  TdeConfig *cfg = memConfig("audit_log = rel-audit.log\n");
  TdeAuditRec r;
  char zPath[PATH_MAX], zRotated[PATH_MAX], zPid[32];
  char *z;
  struct stat st;
  struct tm tm;
  time_t now = time(0), t;
  mode_t oldMask;
  (void)state;

  scratchPath("rel-audit.log", zPath);
  oldMask = umask(0);
  tdeAuditInit(&r, "keystore_open");
  r.zKeystore = "wallet";
  tdeAudit(cfg, &r);
  umask(oldMask);
  assert_int_equal(stat(zPath, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);

  z = readText(zPath, 0);
  assert_non_null(z);
  assert_int_equal(countLines(z), 1);
  assert_int_equal(strncmp(z, "{\"ts\":\"", 7), 0);
  {
    const char *ts = z + 7;
    assert_true(isDigits(ts, 4) && ts[4]=='-' && isDigits(ts+5, 2) && ts[7]=='-'
             && isDigits(ts+8, 2) && ts[10]=='T' && isDigits(ts+11, 2) && ts[13]==':'
             && isDigits(ts+14, 2) && ts[16]==':' && isDigits(ts+17, 2) && ts[19]=='.'
             && isDigits(ts+20, 3) && ts[23]=='Z' && ts[24]=='"');
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = atoi(ts) - 1900;
    tm.tm_mon = atoi(ts+5) - 1;
    tm.tm_mday = atoi(ts+8);
    tm.tm_hour = atoi(ts+11);
    tm.tm_min = atoi(ts+14);
    tm.tm_sec = atoi(ts+17);
    t = timegm(&tm);
    assert_true(t >= now-5 && t <= now+5);
  }
  snprintf(zPid, sizeof(zPid), ",\"pid\":%d,", (int)getpid());
  assert_non_null(strstr(z, zPid));
  assert_non_null(strstr(z, "\"op\":\"keystore_open\",\"outcome\":\"success\""));
  assert_string_equal(strchr(z, '}'), "}\n");
  free(z);

  tdeAudit(cfg, &r);
  z = readText(zPath, 0);
  assert_int_equal(countLines(z), 2);
  free(z);

  /* logrotate moves the file away: the next line starts a new file. */
  scratchPath("rel-audit.log.1", zRotated);
  assert_int_equal(rename(zPath, zRotated), 0);
  tdeAudit(cfg, &r);
  z = readText(zPath, 0);
  assert_non_null(z);
  assert_int_equal(countLines(z), 1);
  free(z);
  z = readText(zRotated, 0);
  assert_int_equal(countLines(z), 2);
  free(z);
  /* ... and removed outright. */
  assert_int_equal(unlink(zPath), 0);
  tdeAudit(cfg, &r);
  z = readText(zPath, 0);
  assert_non_null(z);
  assert_int_equal(countLines(z), 1);
  free(z);
  tdeConfigFree(cfg);
}

/* No audit_log: nothing written, nothing warned. */
static void test_no_audit_configured(void **state){
  TdeConfig *cfg = memConfig("");
  TdeAuditRec r;
  int nWarn = nAuditWarn;
  (void)state;
  tdeAuditInit(&r, "keystore_open");
  tdeAudit(cfg, &r);
  tdeAudit(0, &r);
  tdeAudit(cfg, 0);
  assert_int_equal(nAuditWarn, nWarn);
  tdeConfigFree(cfg);
}

/* A log that cannot be written warns once (until it works again), and
** neither tde_last_error() nor errno of the caller changes. */
static void test_unwritable_log(void **state){
  TdeConfig *cfg = memConfig("audit_log = no-such-dir/audit.log\n");
  TdeAuditRec r;
  char zDir[PATH_MAX], zPath[PATH_MAX];
  char *z;
  int nWarn = nAuditWarn;
  (void)state;

  tdeAuditInit(&r, "dek_unwrap");
  tdeErr(TDE_AUTH, "keep me");
  errno = ERANGE;
  tdeAudit(cfg, &r);
  assert_int_equal(errno, ERANGE);
  assert_string_equal(tde_last_error(), "keep me");
  tdeAudit(cfg, &r);
  tdeAudit(cfg, &r);
  assert_int_equal(nAuditWarn, nWarn+1);

  /* The directory appears: lines flow again, and a new failure warns anew. */
  scratchPath("no-such-dir", zDir);
  assert_int_equal(mkdir(zDir, 0700), 0);
  tdeAudit(cfg, &r);
  assert_int_equal(nAuditWarn, nWarn+1);
  scratchPath("no-such-dir/audit.log", zPath);
  z = readText(zPath, 0);
  assert_non_null(z);
  assert_int_equal(countLines(z), 1);
  free(z);
  assert_int_equal(unlink(zPath), 0);
  assert_int_equal(rmdir(zDir), 0);
  tdeAudit(cfg, &r);
  assert_int_equal(nAuditWarn, nWarn+2);

  /* An empty success leaves no stale message behind. */
  tdeErrClear();
  tdeAudit(cfg, &r);
  assert_string_equal(tde_last_error(), "");
  tdeConfigFree(cfg);
}

/* audit_syslog takes yes or no only; with yes a line goes to syslog (not
** checked here: the test host may have no syslog daemon) and the file. */
static void test_syslog_config(void **state){
  TdeConfig *p = 0;
  TdeAuditRec r;
  char zPath[PATH_MAX];
  char *z;
  (void)state;
  expectRc(tdeConfigParse("keystore = wallet\naudit_syslog = maybe\n", "s.conf",
                          zScratch, &p), TDE_CONFIG);
  assert_null(p);
  assert_non_null(strstr(tde_last_error(), "s.conf:2"));
  expectRc(tdeConfigParse("keystore = wallet\naudit_syslog = YES\n", "s.conf",
                          zScratch, &p), TDE_CONFIG);
  expectRc(tdeConfigParse("keystore = wallet\naudit_syslog = no\n", "s.conf",
                          zScratch, &p), TDE_OK);
  tdeConfigFree(p);
  p = memConfig("audit_syslog = yes\naudit_log = sys.log\n");
  tdeAuditInit(&r, "keystore_close");
  tdeAudit(p, &r);
  scratchPath("sys.log", zPath);
  z = readText(zPath, 0);
  assert_non_null(z);
  assert_int_equal(countLines(z), 1);
  free(z);
  tdeConfigFree(p);
  p = memConfig("audit_syslog = yes\n");      /* syslog only: no file, no warning */
  tdeAudit(p, &r);
  tdeConfigFree(p);
}

/* ---- concurrency ----------------------------------------------------------- */

#define MP_PROC 4
#define MP_LINES 200
#define MP_LONG 6000     /* beyond PIPE_BUF and the formatter's stack buffer */

/* Python literal of what the odd detail must decode to. */
static const char zOddDetail[] = "q\"\\\n\x02 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xff";
static const char zOddPython[] = "'q\"\\\\\\n\\x02 caf\\u00e9 \\u20ac \\U0001f600 \\ufffd'";

static void test_multiprocess_append(void **state){
  TdeConfig *cfg = memConfig("audit_log = mp-audit.log\n");
  char zLog[PATH_MAX], zScript[PATH_MAX], zCmd[3*PATH_MAX];
  char *zLong;
  pid_t aPid[MP_PROC];
  FILE *f;
  int i;
  (void)state;

  zLong = malloc(MP_LONG + 1);
  assert_non_null(zLong);
  memset(zLong, 'x', MP_LONG);
  zLong[MP_LONG] = 0;
  for(i=0; i<MP_PROC; i++){
    aPid[i] = fork();
    assert_true(aPid[i] >= 0);
    if( aPid[i]==0 ){
      static const uint8_t aDbid[16] = {0xde,0xad,0xbe,0xef};
      TdeAuditRec r;
      int j;
      for(j=0; j<MP_LINES; j++){
        tdeAuditInit(&r, "dek_unwrap");
        r.zDbPath = "/db/path with \"quotes\".db";
        r.aDbid = aDbid;
        r.zKeyId = "wallet-0123456789abcdef0123456789abcdef";
        r.keyVersion = i+1;
        r.nPages = j;
        r.zDetail = j%10==3 ? zLong : zOddDetail;
        tdeAudit(cfg, &r);
      }
      _exit(0);
    }
  }
  for(i=0; i<MP_PROC; i++){
    int status = -1;
    assert_int_equal(waitpid(aPid[i], &status, 0), aPid[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  free(zLong);

  /* Every line is one JSON object with keys in the documented order; each
  ** process's 200 lines are all there, in its order. */
  scratchPath("mp-audit.log", zLog);
  scratchPath("check.py", zScript);
  f = fopen(zScript, "w");
  assert_non_null(f);
  fprintf(f,
    "import json, sys, collections\n"
    "order = ['ts','op','outcome','pid','db_path','db_id','keystore','key_id',\n"
    "         'new_key_id','key_version','new_key_version','pages','detail']\n"
    "data = open(sys.argv[1], 'rb').read()\n"
    "assert data.endswith(b'\\n'), 'no final newline'\n"
    "seen = collections.defaultdict(list)\n"
    "for raw in data.split(b'\\n')[:-1]:\n"
    "    o = json.loads(raw.decode('utf-8'))\n"
    "    idx = [order.index(k) for k in o]\n"
    "    assert idx == sorted(idx), raw[:80]\n"
    "    assert o['op'] == 'dek_unwrap' and o['outcome'] == 'success'\n"
    "    assert o['db_path'] == '/db/path with \"quotes\".db'\n"
    "    assert o['db_id'] == 'deadbeef' + '0'*24\n"
    "    want = 'x'*%d if o['pages'] %% 10 == 3 else %s\n"
    "    assert o['detail'] == want, repr(o['detail'][:40])\n"
    "    seen[o['pid']].append((o['key_version'], o['pages']))\n"
    "assert len(seen) == %d, len(seen)\n"
    "for pid, v in seen.items():\n"
    "    assert [p for _, p in v] == list(range(%d)), pid\n"
    "    assert len(set(k for k, _ in v)) == 1\n",
    MP_LONG, zOddPython, MP_PROC, MP_LINES);
  assert_int_equal(fclose(f), 0);
  snprintf(zCmd, sizeof(zCmd), "/usr/bin/python3 '%s' '%s'", zScript, zLog);
  assert_int_equal(system(zCmd), 0);
  tdeConfigFree(cfg);
}

/* ---- a keystore's life ----------------------------------------------------- */

typedef struct ListCtx { char azId[4][TDE_KEYID_MAX+1]; char azStatus[4][16]; int n; } ListCtx;
static int listCb(void *pArg, const char *zKeyId, int64_t created, const char *zStatus){
  ListCtx *p = pArg;
  (void)created;
  if( p->n<4 ){
    snprintf(p->azId[p->n], sizeof(p->azId[0]), "%s", zKeyId);
    snprintf(p->azStatus[p->n], sizeof(p->azStatus[0]), "%s", zStatus);
  }
  p->n++;
  return 0;
}

/* Value of "zKey":"..." in a line (no escapes expected), or "" if absent. */
static void lineField(const char *zLine, const char *zKey, char *zOut, size_t nOut){
  char zPat[64];
  const char *z, *zEnd;
  snprintf(zPat, sizeof(zPat), "\"%s\":\"", zKey);
  zOut[0] = 0;
  z = strstr(zLine, zPat);
  if( z==0 ) return;
  z += strlen(zPat);
  zEnd = strchr(z, '"');
  if( zEnd==0 || (size_t)(zEnd-z)>=nOut ) return;
  memcpy(zOut, z, (size_t)(zEnd-z));
  zOut[zEnd-z] = 0;
}

/* Longest run of characters for which xIn is true. */
static int longestRun(const char *z, int (*xIn)(int)){
  int n = 0, best = 0;
  for(; *z; z++){
    n = xIn((unsigned char)*z) ? n+1 : 0;
    if( n>best ) best = n;
  }
  return best;
}
static int isHex(int c){ return (c>='0' && c<='9') || (c>='a' && c<='f') || (c>='A' && c<='F'); }
static int isB64(int c){
  return (c>='0' && c<='9') || (c>='a' && c<='z') || (c>='A' && c<='Z') || c=='+' || c=='/';
}

static void test_keystore_flow(void **state){
  static const char zGoodPw[] = "Tr0ub4dor&3-correct-horse";
  static const char zBadPw[] = "hunter2-wrong-password";
  static const char zArgPw[] = "another-wrong-one-by-arg";
  static const struct { const char *zOp; const char *zOutcome; int iKey; } aWant[] = {
    { "keystore_create",   "success", 1 },
    { "keystore_open",     "failure", 0 },   /* wrong password from a file */
    { "keystore_open",     "failure", 0 },   /* wrong password by argument */
    { "keystore_open",     "success", 1 },
    { "master_key_create", "success", 2 },
    { "master_key_retire", "failure", 2 },   /* current key */
    { "master_key_retire", "success", 1 },
    { "master_key_retire", "success", 1 },   /* again: already retired */
    { "master_key_retire", "failure", 3 },   /* not held */
    { "keystore_close",    "success", 0 },
  };
  char zCfgA[PATH_MAX], zCfgB[PATH_MAX], zLog[PATH_MAX], zText[2048];
  char zId1[TDE_KEYID_MAX+1], zId2[TDE_KEYID_MAX+1], zSmall[8];
  char zCmd[2*PATH_MAX];
  const char *azKey[4];
  char *zAll, *zLine;
  size_t nAll, i;
  ListCtx list;
  struct stat st;
  int nLine = 0;
  (void)state;

  writeText("good.pw", zGoodPw, 0600);
  writeText("bad.pw", zBadPw, 0600);
  snprintf(zText, sizeof(zText),
           "keystore = wallet\nwallet = flow.wallet\nwallet_kdf_t = 1\n"
           "wallet_kdf_m_kib = 8192\npassword_file = good.pw\naudit_log = flow-audit.log\n");
  writeText("a.conf", zText, 0600);
  snprintf(zText, sizeof(zText),
           "keystore = wallet\nwallet = flow.wallet\npassword_file = bad.pw\n"
           "audit_log = %s/flow-audit.log\n", zScratch);
  writeText("b.conf", zText, 0600);
  scratchPath("a.conf", zCfgA);
  scratchPath("b.conf", zCfgB);
  scratchPath("flow-audit.log", zLog);

  expectRc(tde_keystore_create(zCfgA, 0, zId1, sizeof(zId1)), TDE_OK);
  expectRc(tde_keystore_open(zCfgB, 0), TDE_BADPASSWORD);
  expectRc(tde_keystore_open(zCfgB, zArgPw), TDE_BADPASSWORD);
  assert_non_null(strstr(tde_last_error(), "password incorrect"));   /* not clobbered */
  expectRc(tde_keystore_open(zCfgA, 0), TDE_OK);
  expectRc(tde_keystore_new_key(zCfgA, zSmall, sizeof(zSmall)), TDE_RANGE);
  expectRc(tde_keystore_new_key(zCfgA, zId2, sizeof(zId2)), TDE_OK);
  assert_string_not_equal(zId1, zId2);
  expectRc(tde_keystore_retire(zCfgA, zId2), TDE_MISUSE);
  assert_non_null(strstr(tde_last_error(), "current key"));
  expectRc(tde_keystore_retire(zCfgA, zId1), TDE_OK);
  expectRc(tde_keystore_retire(zCfgA, zId1), TDE_OK);
  expectRc(tde_keystore_retire(zCfgA, "wallet-00000000000000000000000000000000"), TDE_NOKEY);
  expectRc(tde_keystore_retire(zCfgA, ""), TDE_MISUSE);     /* not audited: no call made */
  memset(&list, 0, sizeof(list));
  expectRc(tde_keystore_list(zCfgA, listCb, &list), TDE_OK);
  assert_int_equal(list.n, 2);
  assert_string_equal(list.azId[0], zId1);
  assert_string_equal(list.azStatus[0], "RETIRED");
  assert_string_equal(list.azId[1], zId2);
  assert_string_equal(list.azStatus[1], "ACTIVE");
  expectRc(tde_keystore_close(zCfgA), TDE_OK);

  /* The operations, in order, with the right outcome and key ids. */
  azKey[0] = "";
  azKey[1] = zId1;
  azKey[2] = zId2;
  azKey[3] = "wallet-00000000000000000000000000000000";
  assert_int_equal(stat(zLog, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  zAll = readText(zLog, &nAll);
  assert_non_null(zAll);
  assert_int_equal(countLines(zAll), (int)TDE_ARRAY_SIZE(aWant));
  for(zLine=zAll; *zLine; nLine++){
    char *zEnd = strchr(zLine, '\n');
    char zOp[64], zOutcome[16], zKeyId[TDE_KEYID_MAX+1], zKs[16];
    assert_non_null(zEnd);
    *zEnd = 0;
    lineField(zLine, "op", zOp, sizeof(zOp));
    lineField(zLine, "outcome", zOutcome, sizeof(zOutcome));
    lineField(zLine, "key_id", zKeyId, sizeof(zKeyId));
    lineField(zLine, "keystore", zKs, sizeof(zKs));
    if( strcmp(zOp, aWant[nLine].zOp)!=0 || strcmp(zOutcome, aWant[nLine].zOutcome)!=0
     || strcmp(zKeyId, azKey[aWant[nLine].iKey])!=0 || strcmp(zKs, "wallet")!=0 ){
      fail_msg("line %d: %s", nLine+1, zLine);
    }
    if( nLine==1 || nLine==2 ){
      assert_non_null(strstr(zLine, "password incorrect"));
    }
    *zEnd = '\n';
    zLine = zEnd+1;
  }

  /* No secrets: not the passwords, no raw bytes (everything is printable
  ** ASCII here), no 32-byte key in hex (64 hex digits) or base64 (43
  ** characters and '='; runs of 44 of the alphabet are refused too). */
  assert_null(strstr(zAll, zGoodPw));
  assert_null(strstr(zAll, zBadPw));
  assert_null(strstr(zAll, zArgPw));
  for(i=0; i<nAll; i++){
    if( zAll[i]!='\n' && (zAll[i]<0x20 || zAll[i]>0x7e) ) fail_msg("byte %zu is 0x%02x", i, zAll[i]);
  }
  assert_true(longestRun(zAll, isHex) < 64);
  assert_true(longestRun(zAll, isB64) < 44);
  free(zAll);

  /* And it is valid JSON, line by line. */
  snprintf(zCmd, sizeof(zCmd), "/usr/bin/python3 -c 'import json,sys\n"
           "[json.loads(l) for l in open(sys.argv[1])]' '%s'", zLog);
  assert_int_equal(system(zCmd), 0);
}

/* An open whose configuration names a missing wallet is audited too. */
static void test_open_missing_audited(void **state){
  char zCfg[PATH_MAX], zLog[PATH_MAX], zText[512];
  char *z;
  (void)state;
  snprintf(zText, sizeof(zText), "keystore = wallet\nwallet = absent.wallet\n"
           "audit_log = missing-audit.log\n");
  writeText("m.conf", zText, 0600);
  scratchPath("m.conf", zCfg);
  scratchPath("missing-audit.log", zLog);
  expectRc(tde_keystore_open(zCfg, "tde-test-pw-7Qx2"), TDE_NOKEYSTORE);
  expectRc(tde_keystore_close(zCfg), TDE_NOTFOUND);       /* nothing open: no line */
  z = readText(zLog, 0);
  assert_non_null(z);
  assert_int_equal(countLines(z), 1);
  assert_non_null(strstr(z, "\"op\":\"keystore_open\",\"outcome\":\"failure\""));
  assert_non_null(strstr(z, "not found"));
  free(z);
}

static void test_no_error_logs(void **state){
  (void)state;
  if( nErrorLog ) fail_msg("%d error log line(s), first: %s", nErrorLog, zFirstErrorLog);
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_format_known_answer),
    cmocka_unit_test(test_format_omission),
    cmocka_unit_test(test_write_line),
    cmocka_unit_test(test_no_audit_configured),
    cmocka_unit_test(test_unwritable_log),
    cmocka_unit_test(test_syslog_config),
    cmocka_unit_test(test_multiprocess_append),
    cmocka_unit_test(test_keystore_flow),
    cmocka_unit_test(test_open_missing_audited),
    cmocka_unit_test(test_no_error_logs),       /* keep last */
  };
  return cmocka_run_group_tests(tests, setupScratch, teardownScratch);
}
