-- The lock table of locks/src/mysql.rs (MySQL 8 / MariaDB 10.6+). One row per lock
-- key; rows are never deleted, so the fencing token survives every release.
CREATE TABLE IF NOT EXISTS distributed_lock (
    lock_key        VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'What the lock protects, e.g. stock:42.',
    holder_id       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'Who holds it; NULL when free. Rows are never deleted: release sets this to NULL.',
    reentrant_count INT          NOT NULL DEFAULT 0 COMMENT 'How many times the holder has acquired it without releasing (reentrancy).',
    expire_time     DATETIME(6)  NULL COMMENT 'Lease end, by the database clock (NOW(6)); past it another holder may steal the lock.',
    fence_token     BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Incremented on every new acquisition: the fencing token. Survives release because the row does.',
    updated_at      DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6) COMMENT 'Last change, server clock.',
    PRIMARY KEY (lock_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
  COMMENT='The MySQL lock table (locks/src/mysql.rs): reentrant, leased, stealable after expiry, fenced.';
