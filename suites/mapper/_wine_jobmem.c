/* The memory container of harness/runner/_jobmem.py (run --memory-limit, capacity on Windows),
   made from C under Wine's kernel32: no Windows CPython runs here, the calls can. The limit
   class, flags, completion-port class and message id come from the command line (the test reads
   them from _jobmem.py), so the sequence run here is _jobmem's, not a copy of it. Compiled with
   mingw at test time (suites/mapper/test_wine_jobmem.py), never committed as a binary. Prints
   one JSON line per step.

   Usage: jobmem.exe sizes
          jobmem.exe limit CLASS FLAGS PORT_CLASS LIMIT_MIB COMMIT_MIB KILL_FLAGS
              (job A with KILL_FLAGS, as harness/runner/spawn.py makes per group; job B with FLAGS
               and a job memory limit of LIMIT_MIB, its completion port associated with
               PORT_CLASS; starts "child COMMIT_MIB" suspended, assigns it to A then to B (the
               order group.py uses), resumes it, waits, then drains B's port: every message and
               process id; B's PeakJobMemoryUsed)
          jobmem.exe child COMMIT_MIB
              (commits and touches 8 MiB, then tries to commit COMMIT_MIB more: ok or the error)
*/
#include <windows.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024ULL * 1024ULL)

static const char *yes(BOOL b) { return b ? "true" : "false"; }

static int sizes_mode(void) {
    printf("{\"sizes\": {\"extended\": %u, \"job_memory_limit_at\": %u, \"peak_job_memory_at\": %u,"
           " \"port\": %u, \"port_handle_at\": %u}}\n",
           (unsigned)sizeof(JOBOBJECT_EXTENDED_LIMIT_INFORMATION),
           (unsigned)offsetof(JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobMemoryLimit),
           (unsigned)offsetof(JOBOBJECT_EXTENDED_LIMIT_INFORMATION, PeakJobMemoryUsed),
           (unsigned)sizeof(JOBOBJECT_ASSOCIATE_COMPLETION_PORT),
           (unsigned)offsetof(JOBOBJECT_ASSOCIATE_COMPLETION_PORT, CompletionPort));
    return 0;
}

static int child_mode(char **argv) {
    SIZE_T small = 8 * MIB, big = (SIZE_T)_strtoui64(argv[2], NULL, 10) * MIB;
    char *kept = VirtualAlloc(NULL, small, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
    if (kept) memset(kept, 0xA5, small);
    char *more = VirtualAlloc(NULL, big, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
    DWORD err = more ? 0 : GetLastError();
    if (more) memset(more, 0x5A, big);
    printf("{\"child\": %lu, \"small\": %s, \"big\": %s, \"big_error\": %lu}\n", GetCurrentProcessId(), yes(kept != NULL),
           yes(more != NULL), err);
    fflush(stdout);
    return 0;
}

static HANDLE kill_job(const char *flags) {
    HANDLE job = CreateJobObjectW(NULL, NULL);
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION info = {0};
    info.BasicLimitInformation.LimitFlags = strtoul(flags, NULL, 0);
    SetInformationJobObject(job, JobObjectExtendedLimitInformation, &info, sizeof info);
    return job;
}

static int limit_mode(char **argv) {
    int cls = atoi(argv[2]), port_cls = atoi(argv[4]);
    HANDLE outer = kill_job(argv[7]);
    HANDLE job = CreateJobObjectW(NULL, NULL);
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION info = {0};
    info.BasicLimitInformation.LimitFlags = strtoul(argv[3], NULL, 0);
    info.JobMemoryLimit = (SIZE_T)_strtoui64(argv[5], NULL, 10) * MIB;
    BOOL set = SetInformationJobObject(job, cls, &info, sizeof info);
    DWORD set_error = set ? 0 : GetLastError();
    HANDLE port = CreateIoCompletionPort(INVALID_HANDLE_VALUE, NULL, 0, 1);
    JOBOBJECT_ASSOCIATE_COMPLETION_PORT assoc = {NULL, port};
    BOOL associated = SetInformationJobObject(job, port_cls, &assoc, sizeof assoc);

    char exe[MAX_PATH], line[MAX_PATH + 64];
    GetModuleFileNameA(NULL, exe, MAX_PATH);
    snprintf(line, sizeof line, "\"%s\" child %s", exe, argv[6]);
    STARTUPINFOA si = {sizeof si};
    PROCESS_INFORMATION pi = {0};
    BOOL started = CreateProcessA(NULL, line, NULL, NULL, TRUE, CREATE_SUSPENDED, NULL, NULL, &si, &pi);
    BOOL in_outer = started && AssignProcessToJobObject(outer, pi.hProcess);
    BOOL assigned = started && AssignProcessToJobObject(job, pi.hProcess);
    DWORD assign_error = assigned ? 0 : GetLastError();
    printf("{\"job\": %s, \"set\": %s, \"set_error\": %lu, \"port\": %s, \"associated\": %s, \"started\": %s,"
           " \"in_outer\": %s, \"assigned\": %s, \"assign_error\": %lu, \"pid\": %lu}\n",
           yes(job != NULL), yes(set), set_error, yes(port != NULL), yes(associated), yes(started), yes(in_outer),
           yes(assigned), assign_error, pi.dwProcessId);
    fflush(stdout);
    if (!started) return 0;
    ResumeThread(pi.hThread);
    WaitForSingleObject(pi.hProcess, 60000);

    DWORD message = 0; ULONG_PTR key = 0; LPOVERLAPPED overlapped = NULL;
    printf("{\"messages\": [");
    int first = 1;
    while (GetQueuedCompletionStatus(port, &message, &key, &overlapped, 0)) {
        printf("%s[%lu, %lu]", first ? "" : ", ", message, (DWORD)(ULONG_PTR)overlapped);
        first = 0;
    }
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION after = {0};
    BOOL queried = QueryInformationJobObject(job, cls, &after, sizeof after, NULL);
    printf("], \"queried\": %s, \"peak_job_memory\": %llu, \"limit_back\": %llu}\n", yes(queried),
           (unsigned long long)after.PeakJobMemoryUsed, (unsigned long long)after.JobMemoryLimit);
    CloseHandle(job); CloseHandle(outer); CloseHandle(port);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "sizes")) return sizes_mode();
    if (argc >= 3 && !strcmp(mode, "child")) return child_mode(argv);
    if (argc >= 8 && !strcmp(mode, "limit")) return limit_mode(argv);
    fprintf(stderr, "usage: see the comment at the top of _wine_jobmem.c\n");
    return 2;
}
