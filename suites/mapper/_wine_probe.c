/* Executor B of the Wine differential tests (suites/mapper/test_wine_differential.py).

   It makes no decision of its own: it replays, call by call, the kernel32 calls that the
   Python mapper (`mapper_impl/_windows.py`, `_winapi.py`) made over the fake kernel32, with
   the very flags the Python code passed (the trace is written by `_wine_exec.py` from the fake's
   record), and prints each outcome as one JSON line: ok, GetLastError on failure, bytes read,
   size, file id, a digest of the bytes read. Compiled with mingw at test time, never committed
   as a binary.

   Usage: probe.exe replay TRACE          (one call per line, tab-separated, UTF-8)
          probe.exe upstream PATH         (the upstream call sequence, flags from windows.h)
          probe.exe job CLASS FLAGS PIDFILE [WAIT_MS] (kill-on-close job: the child must die on close)
          probe.exe lost CLASS FLAGS PIDFILE (the job's handle is lost: its owner exits)
          probe.exe owner CLASS FLAGS PIDFILE (lost's helper: makes the job, exits)
          probe.exe spawner PIDFILE        (a launcher: starts a "sleep" grandchild, sleeps)
          probe.exe tree CLASS FLAGS PIDFILE (the worker's own pid, parent and job vs the launcher's)
          probe.exe sleep [PIDFILE]        (writes its own pid there, sleeps 60 s)
*/
#include <windows.h>
#include <tlhelp32.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 4096
static void *slot[SLOTS];

static unsigned long long fnv(const unsigned char *p, size_t n) {
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
    return h;
}

static wchar_t *wide(const char *utf8) {
    int n = MultiByteToWideChar(CP_UTF8, 0, utf8, -1, NULL, 0);
    wchar_t *w = malloc(sizeof(wchar_t) * (n + 1));
    MultiByteToWideChar(CP_UTF8, 0, utf8, -1, w, n);
    return w;
}

static void emit(int idx, const char *call, BOOL ok, const char *extra) {
    DWORD err = ok ? 0 : GetLastError();
    printf("{\"i\": %d, \"call\": \"%s\", \"ok\": %s, \"err\": %lu%s%s}\n", idx, call,
           ok ? "true" : "false", err, extra[0] ? ", " : "", extra);
}

static unsigned long long num(char **save) { return _strtoui64(strtok_r(NULL, "\t\n", save), NULL, 0); }
static void *ref(char **save) { return slot[num(save) % SLOTS]; }

/* The calls another process makes in the scenarios, and PEEK (reading a view's memory). */
static BOOL other_call(const char *call, char **save, BOOL *ok, char *extra, size_t size) {
    if (!strcmp(call, "SetEndOfFile")) {
        *ok = SetEndOfFile(ref(save));
    } else if (!strcmp(call, "MoveFileExW")) {
        wchar_t *src = wide(strtok_r(NULL, "\t\n", save)), *dst = wide(strtok_r(NULL, "\t\n", save));
        *ok = MoveFileExW(src, dst, num(save)); free(src); free(dst);
    } else if (!strcmp(call, "DeleteFileW")) {
        wchar_t *path = wide(strtok_r(NULL, "\t\n", save));
        *ok = DeleteFileW(path); free(path);
    } else if (!strcmp(call, "PEEK")) {  /* not a kernel32 call: read the view's memory */
        unsigned char *v = ref(save); unsigned long long at = num(save), n = num(save);
        *ok = v != NULL;
        if (*ok) snprintf(extra, size, "\"n\": %llu, \"digest\": \"%016llx\"", n, fnv(v + at, n));
    } else {
        return FALSE;
    }
    return TRUE;
}

static void replay_line(char *line) {
    char *save = NULL, extra[256] = "";
    char *first = strtok_r(line, "\t\n", &save);
    if (!first) return;
    if (!strcmp(first, "SCENARIO")) { printf("{\"scenario\": \"%s\"}\n", strtok_r(NULL, "\t\n", &save)); memset(slot, 0, sizeof slot); return; }
    int idx = atoi(first);
    char *call = strtok_r(NULL, "\t\n", &save);
    BOOL ok = FALSE;
    SetLastError(0);
    if (!strcmp(call, "GetSystemInfo")) {
        SYSTEM_INFO si; GetSystemInfo(&si); ok = TRUE;
        snprintf(extra, sizeof extra, "\"granularity\": %lu", si.dwAllocationGranularity);
    } else if (!strcmp(call, "CreateFileW")) {
        wchar_t *path = wide(strtok_r(NULL, "\t\n", &save));
        DWORD access = num(&save), share = num(&save), disposition = num(&save), flags = num(&save);
        HANDLE h = CreateFileW(path, access, share, NULL, disposition, flags, NULL);
        ok = h != INVALID_HANDLE_VALUE && h != NULL; slot[idx] = h; free(path);
    } else if (!strcmp(call, "GetFileSizeEx")) {
        LARGE_INTEGER size = {0}; ok = GetFileSizeEx(ref(&save), &size);
        if (ok) snprintf(extra, sizeof extra, "\"size\": %lld", size.QuadPart);
    } else if (!strcmp(call, "GetFileInformationByHandle")) {
        BY_HANDLE_FILE_INFORMATION info; ok = GetFileInformationByHandle(ref(&save), &info);
    } else if (!strcmp(call, "GetFileInformationByHandleEx")) {
        HANDLE h = ref(&save); int cls = num(&save); DWORD size = num(&save);
        FILE_ID_INFO id; ok = GetFileInformationByHandleEx(h, cls, &id, size);
        if (ok) snprintf(extra, sizeof extra, "\"id\": \"%llx:%016llx\"", id.VolumeSerialNumber,
                         fnv(id.FileId.Identifier, 16));
    } else if (!strcmp(call, "ReadFile")) {
        HANDLE h = ref(&save); DWORD n = num(&save); unsigned long long at = num(&save);
        unsigned char *buf = malloc(n ? n : 1); DWORD done = 0; OVERLAPPED o = {0};
        o.Offset = (DWORD)at; o.OffsetHigh = (DWORD)(at >> 32);
        ok = ReadFile(h, buf, n, &done, &o);
        snprintf(extra, sizeof extra, "\"n\": %lu, \"digest\": \"%016llx\"", done, fnv(buf, done));
        free(buf);
    } else if (!strcmp(call, "CreateFileMappingW")) {
        HANDLE h = ref(&save); DWORD protect = num(&save), high = num(&save), low = num(&save);
        HANDLE m = CreateFileMappingW(h, NULL, protect, high, low, NULL); ok = m != NULL; slot[idx] = m;
    } else if (!strcmp(call, "MapViewOfFile")) {
        HANDLE m = ref(&save); DWORD access = num(&save), high = num(&save), low = num(&save);
        SIZE_T length = num(&save);
        void *v = MapViewOfFile(m, access, high, low, length); ok = v != NULL; slot[idx] = v;
    } else if (!strcmp(call, "UnmapViewOfFile")) {
        ok = UnmapViewOfFile(ref(&save));
    } else if (!strcmp(call, "CloseHandle")) {
        ok = CloseHandle(ref(&save));
    } else if (!other_call(call, &save, &ok, extra, sizeof extra)) {
        fprintf(stderr, "unknown call %s\n", call); exit(2);
    }
    emit(idx, call, ok, extra);
}

static int replay(const char *trace) {
    FILE *f = fopen(trace, "rb");
    if (!f) { perror(trace); return 2; }
    static char line[65536];
    while (fgets(line, sizeof line, f)) replay_line(line);
    fclose(f);
    return 0;
}

/* The upstream sequence (WindowsFileMapper::Map in qnn_windows_file_mapper.cc), written here
   with windows.h's own constants, independently of _winapi.py: the test compares it, call by
   call and flag by flag, with what the Python mapper passed over the fake. */
static void step(const char *call, BOOL ok, const char *args) {
    printf("{\"call\": \"%s\", \"args\": [%s], \"ok\": %s, \"err\": %lu}\n", call, args,
           ok ? "true" : "false", ok ? 0 : GetLastError());
}

static int upstream(const char *utf8) {
    char args[256]; wchar_t *path = wide(utf8);
    HANDLE file = CreateFileW(path, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    snprintf(args, sizeof args, "%lu, %lu, %lu, %lu", (DWORD)GENERIC_READ, (DWORD)FILE_SHARE_READ,
             (DWORD)OPEN_EXISTING, (DWORD)FILE_ATTRIBUTE_NORMAL);
    step("CreateFileW", file != INVALID_HANDLE_VALUE, args);
    HANDLE mapping = CreateFileMappingW(file, NULL, PAGE_READONLY, 0, 0, NULL);
    snprintf(args, sizeof args, "%lu, 0, 0", (DWORD)PAGE_READONLY);
    step("CreateFileMappingW", mapping != NULL, args);
    void *view = MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
    snprintf(args, sizeof args, "%lu, 0, 0, 0", (DWORD)FILE_MAP_READ);
    step("MapViewOfFile", view != NULL, args);
    step("CloseHandle", CloseHandle(mapping), "\"mapping\"");
    step("CloseHandle", CloseHandle(file), "\"file\"");
    step("UnmapViewOfFile", UnmapViewOfFile(view), "\"view\"");
    free(path);
    return 0;
}

static HANDLE start(const char *args, DWORD *pid) {
    char exe[MAX_PATH], cmd[4096];
    STARTUPINFOA si = {sizeof si}; PROCESS_INFORMATION pi;
    GetModuleFileNameA(NULL, exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "\"%s\" %s", exe, args);
    if (!CreateProcessA(exe, cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi)) return NULL;
    CloseHandle(pi.hThread);
    *pid = pi.dwProcessId;
    return pi.hProcess;
}

static DWORD read_pid(const char *pidfile) {
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(pidfile, "r"); DWORD pid = 0;
        if (f) { int got = fscanf(f, "%lu", &pid); fclose(f); if (got == 1 && pid) return pid; }
        Sleep(20);
    }
    return 0;
}

/* A job with the harness's limit information class and flags (from harness/contract/spawn.py,
   passed on the command line), a launcher in it that starts the "worker" grandchild. */
static HANDLE make_job(const char *cls, const char *flags, const char *pidfile, HANDLE *launcher, DWORD *worker_pid) {
    HANDLE job = CreateJobObjectW(NULL, NULL);
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION info; memset(&info, 0, sizeof info);
    info.BasicLimitInformation.LimitFlags = strtoul(flags, NULL, 0);
    BOOL set = SetInformationJobObject(job, atoi(cls), &info, sizeof info);
    char args[1024]; DWORD pid = 0;
    snprintf(args, sizeof args, "spawner \"%s\"", pidfile);
    *launcher = start(args, &pid);
    BOOL assigned = AssignProcessToJobObject(job, *launcher);
    *worker_pid = read_pid(pidfile);
    printf("{\"job\": %s, \"set\": %s, \"assigned\": %s, \"launcher\": %lu, \"worker\": %lu}\n", job ? "true" : "false",
           set ? "true" : "false", assigned ? "true" : "false", pid, *worker_pid);
    return job;
}

/* The parent of a process as the process snapshot has it: what psutil's children() (and so
   harness.contract.spawn.worker_pid_in_tree) reads on Windows. */
static DWORD parent_of(DWORD pid) {
    HANDLE snap = CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0);
    PROCESSENTRY32W entry = {sizeof entry}; DWORD parent = 0;
    for (BOOL more = Process32FirstW(snap, &entry); more; more = Process32NextW(snap, &entry))
        if (entry.th32ProcessID == pid) parent = entry.th32ParentProcessID;
    CloseHandle(snap);
    return parent;
}

static DWORD wait_ms = 10000;  /* how long a process may take to end; "job" takes another */

static const char *gone(HANDLE process) {
    return process && WaitForSingleObject(process, wait_ms) == WAIT_OBJECT_0 ? "true" : "false";
}

static int sleep_mode(int argc, char **argv) {
    if (argc >= 3) { FILE *f = fopen(argv[2], "w"); fprintf(f, "%lu\n", GetCurrentProcessId()); fclose(f); }
    Sleep(60000);
    return 0;
}

static int spawner_mode(char **argv) {  /* a launcher: starts the "worker" grandchild, sleeps */
    DWORD pid = 0;
    /* The launcher is assigned to the job right after it starts; wait for that so the
       grandchild is created inside the job, as a venv launcher's child is. */
    BOOL in_job = FALSE;
    for (int i = 0; i < 500 && !in_job; i++) { IsProcessInJob(GetCurrentProcess(), NULL, &in_job); if (!in_job) Sleep(10); }
    char args[1024]; snprintf(args, sizeof args, "sleep \"%s.self\"", argv[2]);
    HANDLE child = start(args, &pid);
    FILE *f = fopen(argv[2], "w"); fprintf(f, "%lu\n", child ? pid : 0); fclose(f);
    Sleep(60000);
    return 0;
}

static int job_mode(int argc, char **argv) {  /* closes the job's handle: both must end */
    if (argc >= 6) wait_ms = strtoul(argv[5], NULL, 0);  /* the negative control's wait */
    HANDLE launcher; DWORD worker_pid;
    HANDLE job = make_job(argv[2], argv[3], argv[4], &launcher, &worker_pid);
    HANDLE worker = OpenProcess(SYNCHRONIZE | PROCESS_TERMINATE, FALSE, worker_pid);
    BOOL closed = CloseHandle(job);
    printf("{\"closed\": %s, \"launcher_gone\": %s, \"worker_gone\": %s}\n", closed ? "true" : "false",
           gone(launcher), gone(worker));
    if (launcher) TerminateProcess(launcher, 1);  /* no-ops when the job did its work; */
    if (worker) TerminateProcess(worker, 1);      /* else no sleeper is left behind     */
    return 0;
}

static int tree_mode(char **argv) {  /* the worker's own view of itself vs the launcher */
    HANDLE launcher; DWORD worker_pid; char self[1100];
    HANDLE job = make_job(argv[2], argv[3], argv[4], &launcher, &worker_pid);
    snprintf(self, sizeof self, "%s.self", argv[4]);
    DWORD own = read_pid(self);
    /* PROCESS_QUERY_INFORMATION: Wine 8 refuses the LIMITED right here (error 5), which
       Windows documents as enough (learn.microsoft.com/windows/win32/api/jobapi/
       nf-jobapi-isprocessinjob); the full right works on both. */
    HANDLE worker = OpenProcess(SYNCHRONIZE | PROCESS_TERMINATE | PROCESS_QUERY_INFORMATION, FALSE, worker_pid);
    BOOL in_job = FALSE, launcher_in_job = FALSE;
    IsProcessInJob(worker, job, &in_job); IsProcessInJob(launcher, job, &launcher_in_job);
    printf("{\"launcher\": %lu, \"worker_self\": %lu, \"worker_parent\": %lu, \"worker_in_job\": %s,"
           " \"launcher_in_job\": %s}\n", GetProcessId(launcher), own, parent_of(worker_pid),
           in_job ? "true" : "false", launcher_in_job ? "true" : "false");
    CloseHandle(job);
    printf("{\"worker_gone\": %s}\n", gone(worker));
    if (launcher) TerminateProcess(launcher, 1);
    if (worker) TerminateProcess(worker, 1);
    return 0;
}

static int owner_mode(char **argv) {  /* holds the job, then exits without closing it */
    HANDLE launcher; DWORD worker_pid;
    HANDLE release = CreateEventW(NULL, TRUE, FALSE, L"qnn_fmw_probe_release");
    make_job(argv[2], argv[3], argv[4], &launcher, &worker_pid);
    fflush(stdout);
    WaitForSingleObject(release, 10000);  /* until "lost" holds the worker's handle */
    ExitProcess(0);  /* the job's only handle is never closed by us: the kernel does it */
}

static int lost_mode(char **argv) {  /* the job's owner dies: the kernel closes its handle */
    char args[1024]; DWORD pid = 0;
    HANDLE release = CreateEventW(NULL, TRUE, FALSE, L"qnn_fmw_probe_release");
    snprintf(args, sizeof args, "owner %s %s \"%s\"", argv[2], argv[3], argv[4]);
    HANDLE owner = start(args, &pid);
    DWORD worker_pid = read_pid(argv[4]);
    HANDLE worker = OpenProcess(SYNCHRONIZE, FALSE, worker_pid);
    SetEvent(release);
    printf("{\"owner_gone\": %s, \"worker\": %lu, \"worker_gone\": %s}\n", gone(owner), worker_pid, gone(worker));
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc >= 2 ? argv[1] : "";
    if (argc >= 3 && !strcmp(mode, "replay")) return replay(argv[2]);
    if (argc >= 3 && !strcmp(mode, "upstream")) return upstream(argv[2]);
    if (!strcmp(mode, "sleep")) return sleep_mode(argc, argv);
    if (argc >= 3 && !strcmp(mode, "spawner")) return spawner_mode(argv);
    if (argc >= 5 && !strcmp(mode, "job")) return job_mode(argc, argv);
    if (argc >= 5 && !strcmp(mode, "tree")) return tree_mode(argv);
    if (argc >= 5 && !strcmp(mode, "owner")) return owner_mode(argv);
    if (argc >= 5 && !strcmp(mode, "lost")) return lost_mode(argv);
    fprintf(stderr, "usage: see the comment at the top of _wine_probe.c\n");
    return 2;
}
