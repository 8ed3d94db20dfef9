/* A desktop user for suites/ci/test_wine_desktop.py: calls GetDesktopWindow (Wine starts its
 * desktop, explorer.exe, when none is up) and exits; with "keep READY" it then writes READY and
 * stays until killed, as the Wine lane's desktop keeper does. */
#include <windows.h>
#include <wchar.h>

int wmain(int argc, wchar_t **argv)
{
    GetDesktopWindow();
    if (argc == 3 && wcscmp(argv[1], L"keep") == 0) {
        HANDLE ready = CreateFileW(argv[2], GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, 0, NULL);
        if (ready == INVALID_HANDLE_VALUE)
            return 2;
        CloseHandle(ready);
        Sleep(INFINITE);
    }
    return 0;
}
