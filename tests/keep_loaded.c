/* keep_loaded.c - sanitizer builds of the tests only: dlclose keeps every shared library loaded.
 *
 * GPU drivers make one-time allocations that stay reachable from their globals while they are loaded; once
 * the Vulkan loader unloads the driver at vkDestroyInstance, LeakSanitizer sees them as leaks it cannot even
 * name ("<unknown module>"). Keeping libraries loaded to the end of the process lets the leak check speak
 * about weft alone. Linked into each test executable (exported, so that libraries resolve dlclose here). */
int dlclose(void *handle);

int dlclose(void *handle) {
  (void)handle;
  return 0;
}
