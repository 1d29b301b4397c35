/*
 * Linux 6.7's PAGEMAP_SCAN ioctl on /proc/PID/pagemap (linux/fs.h), for
 * headers that predate it (Debian 12's). The shim's helper write-protects
 * its present pages with it; the scanner asks which were written since.
 */
#ifndef UNREACHABLE_PAGEMAP_SCAN_H
#define UNREACHABLE_PAGEMAP_SCAN_H

#include <linux/fs.h>
#include <stdint.h>
#include <sys/ioctl.h>

#ifndef PAGEMAP_SCAN
#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
#define PAGE_IS_WPALLOWED (1 << 0)
#define PAGE_IS_WRITTEN (1 << 1)
#define PAGE_IS_PRESENT (1 << 3)
#define PAGE_IS_SWAPPED (1 << 4)
struct page_region {
  uint64_t start, end, categories;
};
struct pm_scan_arg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
  uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#endif

#endif
