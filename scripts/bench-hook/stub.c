/* The baseline: a trivial static hook that reads stdin and prints a fixed answer. */
#include <stdio.h>
#include <unistd.h>

int main(void) {
    char buf[65536];
    while (read(0, buf, sizeof buf) > 0) {
    }
    static const char answer[] =
        "{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\","
        "\"permissionDecision\":\"allow\",\"permissionDecisionReason\":\"stub\"}}\n";
    write(1, answer, sizeof answer - 1);
    return 0;
}
