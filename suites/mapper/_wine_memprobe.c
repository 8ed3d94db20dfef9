/* The parent's memory reads of harness/runner/winmem.py (ProcessCounters(pid).read_split(),
   performance_info()), made from C under Wine's kernel32 and psapi: no Windows CPython runs on
   Linux, the calls can. The rights, inherit flag and structure sizes come from the command line
   (the test reads them from winmem.py), so the sequence run here is winmem's, not a copy of it.
   Compiled with mingw at test time (suites/mapper/test_wine_winmem.py), never committed as a
   binary. Prints one JSON line per step.

   Usage: memprobe.exe sizes
          memprobe.exe counters ACCESS INHERIT CB_PERF FILE MIB FREED_MIB HEX...
              (starts "child", waits until it is ready, opens it with ACCESS and INHERIT, then
               one GetProcessMemoryInfo per HEX: the buffer's bytes before the call, its cb field
               the cb passed; prints the bytes after; then GetPerformanceInfo with CB_PERF)
          memprobe.exe child FILE MIB FREED_MIB EVENT
              (commits and touches MIB MiB it keeps, then FREED_MIB MiB more it releases: the
               commit peak; maps FILE read-only and reads every page; sets EVENT; sleeps 60 s)
          memprobe.exe open ACCESS INHERIT PID (OpenProcess alone: the negative controls)
*/
#include <windows.h>
#include <psapi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PROCESS_MEMORY_COUNTERS_EX2 (the SDK's psapi.h; mingw's does not declare it yet):
   learn.microsoft.com/windows/win32/api/psapi/ns-psapi-process_memory_counters_ex2 */
typedef struct {
    DWORD cb;
    DWORD PageFaultCount;
    SIZE_T PeakWorkingSetSize;
    SIZE_T WorkingSetSize;
    SIZE_T QuotaPeakPagedPoolUsage;
    SIZE_T QuotaPagedPoolUsage;
    SIZE_T QuotaPeakNonPagedPoolUsage;
    SIZE_T QuotaNonPagedPoolUsage;
    SIZE_T PagefileUsage;
    SIZE_T PeakPagefileUsage;
    SIZE_T PrivateUsage;
    SIZE_T PrivateWorkingSetSize;
    ULONG64 SharedCommitUsage;
} COUNTERS_EX2;

#define MIB (1024ULL * 1024ULL)

static const char *yes(BOOL b) { return b ? "true" : "false"; }

static int sizes_mode(void) {
    printf("{\"sizes\": {\"ex\": %u, \"ex2\": %u, \"perf\": %u, \"private_usage_at\": %u,"
           " \"private_ws_at\": %u, \"shared_commit_at\": %u, \"page_size_at\": %u,"
           " \"ex_private_usage_at\": %u}}\n",
           (unsigned)sizeof(PROCESS_MEMORY_COUNTERS_EX), (unsigned)sizeof(COUNTERS_EX2),
           (unsigned)sizeof(PERFORMANCE_INFORMATION), (unsigned)offsetof(COUNTERS_EX2, PrivateUsage),
           (unsigned)offsetof(COUNTERS_EX2, PrivateWorkingSetSize),
           (unsigned)offsetof(COUNTERS_EX2, SharedCommitUsage),
           (unsigned)offsetof(PERFORMANCE_INFORMATION, PageSize),
           (unsigned)offsetof(PROCESS_MEMORY_COUNTERS_EX, PrivateUsage));
    return 0;
}

/* Commits and touches `mib` MiB (every byte written, as a copied weights buffer is). */
static unsigned char *commit(unsigned long long mib) {
    unsigned char *p = VirtualAlloc(NULL, mib * MIB, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
    if (p) memset(p, 0x5A, mib * MIB);
    return p;
}

static int child_mode(char **argv) {
    unsigned long long mib = _strtoui64(argv[3], NULL, 0), freed = _strtoui64(argv[4], NULL, 0);
    unsigned char *kept = commit(mib);
    unsigned char *gone = freed ? commit(freed) : NULL; /* the peak: kept + freed at once */
    BOOL released = gone ? VirtualFree(gone, 0, MEM_RELEASE) : TRUE;
    HANDLE file = CreateFileA(argv[2], GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    LARGE_INTEGER size = {0};
    GetFileSizeEx(file, &size);
    HANDLE mapping = CreateFileMappingW(file, NULL, PAGE_READONLY, 0, 0, NULL);
    const volatile unsigned char *view = mapping ? MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0) : NULL;
    unsigned long long sum = 0, touched = 0;
    for (long long at = 0; view && at < size.QuadPart; at += 4096, touched += 4096) sum += view[at];
    if (touched > (unsigned long long)size.QuadPart) touched = size.QuadPart;
    printf("{\"child\": %lu, \"kept\": %s, \"released\": %s, \"view\": %s, \"mapped_touched\": %llu,"
           " \"sum\": %llu}\n", GetCurrentProcessId(), yes(kept != NULL), yes(released), yes(view != NULL),
           touched, sum);
    fflush(stdout);
    HANDLE ready = OpenEventA(EVENT_MODIFY_STATE, FALSE, argv[5]);
    SetEvent(ready);
    Sleep(60000); /* the parent ends it once it has read */
    return 0;
}

static HANDLE start_child(const char *file, const char *mib, const char *freed, const char *event, DWORD *pid) {
    char exe[MAX_PATH], cmd[4096];
    STARTUPINFOA si = {sizeof si};
    PROCESS_INFORMATION pi;
    GetModuleFileNameA(NULL, exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "\"%s\" child \"%s\" %s %s %s", exe, file, mib, freed, event);
    if (!CreateProcessA(exe, cmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi)) return NULL;
    CloseHandle(pi.hThread);
    *pid = pi.dwProcessId;
    return pi.hProcess;
}

static void unhex(const char *hex, unsigned char *out, size_t n) {
    for (size_t i = 0; i < n; i++) { unsigned v = 0; sscanf(hex + 2 * i, "%2x", &v); out[i] = (unsigned char)v; }
}

static void hexout(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) printf("%02x", p[i]);
}

/* One GetProcessMemoryInfo into a buffer holding the bytes the test passed (winmem's `blank`,
   or a fill pattern), with cb taken from the buffer's own cb field, as winmem passes it; prints
   the bytes after the call, which the test reads with winmem's ctypes structures. */
static void counters_call(HANDLE process, const char *hex) {
    unsigned char buf[256];
    size_t n = strlen(hex) / 2;
    if (n > sizeof buf) n = sizeof buf;
    memset(buf, 0, sizeof buf);
    unhex(hex, buf, n);
    DWORD cb = ((PROCESS_MEMORY_COUNTERS *)buf)->cb;
    SetLastError(0);
    BOOL ok = GetProcessMemoryInfo(process, (PROCESS_MEMORY_COUNTERS *)buf, cb);
    printf("{\"call\": \"GetProcessMemoryInfo\", \"cb\": %lu, \"ok\": %s, \"err\": %lu, \"bytes\": \"", cb, yes(ok),
           ok ? 0 : GetLastError());
    hexout(buf, n);
    printf("\"}\n");
}

static void performance_call(DWORD cb) {
    PERFORMANCE_INFORMATION info;
    memset(&info, 0, sizeof info);
    info.cb = cb;
    SetLastError(0);
    BOOL ok = GetPerformanceInfo(&info, cb);
    printf("{\"call\": \"GetPerformanceInfo\", \"cb\": %lu, \"ok\": %s, \"err\": %lu, \"bytes\": \"", cb, yes(ok),
           ok ? 0 : GetLastError());
    hexout((unsigned char *)&info, sizeof info);
    printf("\"}\n");
}

static HANDLE open_call(const char *access, const char *inherit, DWORD pid) {
    SetLastError(0);
    HANDLE h = OpenProcess(strtoul(access, NULL, 0), atoi(inherit), pid);
    printf("{\"call\": \"OpenProcess\", \"access\": %lu, \"pid\": %lu, \"ok\": %s, \"err\": %lu}\n",
           strtoul(access, NULL, 0), pid, yes(h != NULL), h ? 0 : GetLastError());
    return h;
}

/* argv: counters ACCESS INHERIT CB_PERF FILE MIB FREED_MIB HEX... */
static int counters_mode(int argc, char **argv) {
    char event[64];
    DWORD pid = 0;
    snprintf(event, sizeof event, "qnn_fmw_memprobe_ready_%lu", GetCurrentProcessId());
    HANDLE ready = CreateEventA(NULL, TRUE, FALSE, event);
    fflush(stdout);
    HANDLE child = start_child(argv[5], argv[6], argv[7], event, &pid);
    HANDLE waits[2] = {ready, child};
    DWORD woke = child ? WaitForMultipleObjects(2, waits, FALSE, 120000) : WAIT_FAILED;
    printf("{\"started\": %s, \"ready\": %s}\n", yes(child != NULL), yes(woke == WAIT_OBJECT_0));
    if (woke == WAIT_OBJECT_0) {
        HANDLE process = open_call(argv[2], argv[3], pid); /* winmem's rights and flag */
        for (int i = 8; process && i < argc; i++) counters_call(process, argv[i]); /* in winmem's order */
        if (process) printf("{\"call\": \"CloseHandle\", \"ok\": %s}\n", yes(CloseHandle(process)));
        performance_call(strtoul(argv[4], NULL, 0));
    }
    fflush(stdout);
    if (child) { TerminateProcess(child, 0); WaitForSingleObject(child, 10000); }
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc >= 2 ? argv[1] : "";
    if (!strcmp(mode, "sizes")) return sizes_mode();
    if (argc >= 8 && !strcmp(mode, "counters")) return counters_mode(argc, argv);
    if (argc >= 6 && !strcmp(mode, "child")) return child_mode(argv);
    if (argc >= 5 && !strcmp(mode, "open")) {
        HANDLE h = open_call(argv[2], argv[3], strtoul(argv[4], NULL, 0));
        if (h) CloseHandle(h);
        return 0;
    }
    fprintf(stderr, "usage: see the comment at the top of _wine_memprobe.c\n");
    return 2;
}
