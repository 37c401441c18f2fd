/* test_vk_absent.c - weft without a usable Vulkan: a child process runs with the loader pointed at a driver
 * list that does not exist, so the loader finds no driver. The Vulkan lane must then be absent with a
 * reason a person can act on, and the CPU lane must still work. (Run on a machine without any Vulkan, the
 * parent itself sees the same.) */
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "vkt.h"

extern char **environ;

static int child(void) {
  double start = tu_now();
  weft_fabric *f = NULL;
  TU_STATUS(tu_open(NULL, &f), WEFT_OK, "open with no Vulkan driver");
  if (!f) return tu_finish("vulkan absent (child)", start);
  size_t idx;
  TU_CHECK(weft_fabric_lane_find(f, "vulkan:0", &idx) == WEFT_ERR_NOT_FOUND, "no vulkan lane without a driver");
  const char *name, *reason, *why = NULL;
  for (size_t i = 0; i < weft_fabric_absent_count(f); i++)
    if (weft_fabric_absent_info(f, i, &name, &reason) == WEFT_OK && strncmp(name, "vulkan", 6) == 0) why = reason;
  TU_CHECK(why != NULL, "the vulkan lane is listed as absent");
  if (why) {
    printf("absent: vulkan: %s\n", why);
    TU_CHECK(tu_contains(why, "driver") || tu_contains(why, "loader") || tu_contains(why, "device"),
             "the reason names what is missing: %s", why);
  }
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4];
  int64_t dims[2] = {2, 2};
  weft_tensor *A, *B, *C;
  weft_tensor_create(f, 2, dims, a, &A), weft_tensor_create(f, 2, dims, b, &B), weft_tensor_create(f, 2, dims, NULL, &C);
  TU_STATUS(weft_op_matmul(f, NULL, A, 0, B, 0, C), WEFT_OK, "matmul on what is left");
  TU_STATUS(weft_tensor_read(C, c, 4), WEFT_OK, "read");
  TU_CHECK(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50, "the cpu lane still computes");
  weft_fabric_close(f);
  return tu_finish("vulkan absent (child)", start);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
  double start = tu_now();
  /* Both the current and the older name of the loader's driver-list variable. */
  const char *bogus = "/nonexistent/weft-test/no_such_icd.json";
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 3, sizeof *env);
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "VK_DRIVER_FILES=", 16) && strncmp(environ[i], "VK_ICD_FILENAMES=", 17)) env[m++] = environ[i];
  char v1[128], v2[128];
  snprintf(v1, sizeof v1, "VK_DRIVER_FILES=%s", bogus);
  snprintf(v2, sizeof v2, "VK_ICD_FILENAMES=%s", bogus);
  env[m++] = v1, env[m++] = v2, env[m] = NULL;
  char *args[] = {argv[0], "--child", NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], NULL, NULL, args, env);
  TU_CHECK(rc == 0, "spawn the child: %d", rc);
  int status = 0;
  if (rc == 0) TU_CHECK(waitpid(pid, &status, 0) == pid, "wait for the child");
  TU_CHECK(rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child passed (status 0x%x)", status);
  free(env);
  return tu_finish("vulkan absent", start);
}
