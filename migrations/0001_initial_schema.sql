-- stock-locks: the whole schema. Every column says what it is for.
--
-- Text keys (request ids, lock keys, strategy and backend names) are
-- CHARACTER SET ascii COLLATE ascii_bin: under utf8mb4_unicode_ci 'Abc' and 'abc '
-- are the same key (case-insensitive, PAD SPACE), which would make two different
-- requests collide in a unique index.
--
-- There are no foreign keys on purpose: InnoDB takes a shared lock on the parent row
-- for every child insert, which would add locking the experiments do not ask for.

CREATE TABLE stock (
    product_id       BIGINT   NOT NULL COMMENT 'The product; positive, chosen by the admin (PUT /stock/{product_id}).',
    quantity         INT      NOT NULL COMMENT 'Units left to sell. Never negative (the CHECK below); overselling shows as lost updates in the ledger instead.',
    version          BIGINT   NOT NULL DEFAULT 0 COMMENT 'Bumped by every write to this row: the optimistic strategy''s compare-and-set column.',
    epoch            INT      NOT NULL DEFAULT 1 COMMENT 'Counts restocks: PUT /stock sets quantity and initial_quantity and increments it. Ledger rows carry the epoch they sold from.',
    initial_quantity INT      NOT NULL COMMENT 'The quantity this epoch started with: the S in "sold = S - remaining".',
    updated_at       DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6) COMMENT 'Last write, server clock.',
    PRIMARY KEY (product_id),
    CONSTRAINT stock_quantity_not_negative CHECK (quantity >= 0),
    CONSTRAINT stock_initial_not_negative CHECK (initial_quantity >= 0),
    CONSTRAINT stock_product_positive CHECK (product_id > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
  COMMENT='One row per product: what is left to sell.';

CREATE TABLE orders (
    request_id   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'The client''s idempotency key (or the one the service generated). One successful deduction per id, ever.',
    request_hash CHAR(64)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'SHA-256 (hex) of the canonical request (strategy and items): a retry must match it, or it is answered 422 request_id_reused.',
    strategy     VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'The strategy that deducted.',
    response     JSON        NOT NULL COMMENT 'The 200 body sent to the client; a retry with the same request_id gets it back with "duplicate": true.',
    created_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'When the deduction committed, server clock.',
    PRIMARY KEY (request_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
  COMMENT='One row per successful deduction, written in its transaction: the idempotency record.';

CREATE TABLE ledger (
    request_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'The deduction this line belongs to (orders.request_id).',
    product_id  BIGINT      NOT NULL COMMENT 'The product deducted.',
    quantity    INT         NOT NULL COMMENT 'Units deducted, positive.',
    epoch       INT         NOT NULL COMMENT 'stock.epoch when it was deducted: sums per (product_id, epoch) prove or disprove overselling.',
    strategy    VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'The strategy that deducted.',
    fence_token BIGINT UNSIGNED NULL COMMENT 'The lock''s fencing token for a fenced deduction; NULL when none was used.',
    created_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'When it was written, server clock.',
    PRIMARY KEY (request_id, product_id),
    KEY ledger_product_epoch (product_id, epoch),
    CONSTRAINT ledger_quantity_positive CHECK (quantity > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
  COMMENT='The audit trail, one row per deducted item, same transaction as the stock change. Never deleted. With initial S, remaining R and ledger sum L for an epoch: lost updates = L - (S - R), sold beyond stock = max(0, L - S).';

CREATE TABLE stock_fence (
    product_id BIGINT          NOT NULL COMMENT 'The product the fence guards.',
    backend    VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'The lock backend whose tokens this row holds; tokens of different backends are never compared.',
    token      BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Highest fencing token that claimed the product; only ever raised (UPDATE ... WHERE token < :t).',
    owner      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'For backends without a monotonic token (RedLock): the random owner value of the last claim (check-and-set).',
    updated_at DATETIME(6)     NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6) COMMENT 'Last claim, server clock.',
    PRIMARY KEY (product_id, backend)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
  COMMENT='Fencing: the resource side of a lease lock. A holder whose token is no longer the highest is refused (lock_lost).';

CREATE TABLE distributed_lock (
    lock_key        VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'What the lock protects, e.g. stock:42.',
    holder_id       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'Who holds it; NULL when free. Rows are never deleted: release sets this to NULL.',
    reentrant_count INT          NOT NULL DEFAULT 0 COMMENT 'How many times the holder has acquired it without releasing (reentrancy).',
    expire_time     DATETIME(6)  NULL COMMENT 'Lease end, by the database clock (NOW(6)); past it another holder may steal the lock.',
    fence_token     BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Incremented on every new acquisition: the fencing token. Survives release because the row does.',
    updated_at      DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6) COMMENT 'Last change, server clock.',
    PRIMARY KEY (lock_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
  COMMENT='The MySQL lock table (locks/src/mysql.rs): reentrant, leased, stealable after expiry, fenced.';
