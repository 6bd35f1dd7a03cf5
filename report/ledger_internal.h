/* SPDX-License-Identifier: MIT
 * ibpshim: ledger pieces shared by the files of report/ only. */
#ifndef IBP_REPORT_LEDGER_INTERNAL_H
#define IBP_REPORT_LEDGER_INTERNAL_H

/* Held across fork() so that the child never inherits a mutex locked by a
 * thread it does not have; the ledger takes its own lock first. */
void ibp_site_lock_for_fork(void);
void ibp_site_unlock_after_fork(void);

#endif /* IBP_REPORT_LEDGER_INTERNAL_H */
