/*
 * Linux 6.7's asynchronous userfaultfd write protection and PAGEMAP_SCAN
 * ioctl on /proc/PID/pagemap (linux/userfaultfd.h, linux/fs.h), for headers
 * that predate them (Debian 12's). The shim's helper write-protects with
 * them; the scanner asks which pages were written since, or exist at all.
 */
#ifndef UNREACHABLE_LINUX_COMPAT_H
#define UNREACHABLE_LINUX_COMPAT_H

#include <linux/fs.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <sys/ioctl.h>

#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

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
