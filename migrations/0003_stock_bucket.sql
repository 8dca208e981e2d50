-- The `bucketed` strategy (issue 14): a hot product's stock split over K rows, so K
-- buyers can hold a row lock at once instead of one.
--
-- A restock with `"buckets": K` puts the product's units here (bucket sizes differ by
-- at most one) and leaves 0 in its `stock` row; a restock without it removes the
-- buckets. What is left of a product is always stock.quantity plus its buckets. The
-- other strategies only see the `stock` row, so they never sell split units: a split
-- product is sold by `bucketed` alone, and nothing can be sold twice.
CREATE TABLE stock_bucket (
    product_id BIGINT   NOT NULL COMMENT 'The product (stock.product_id) whose units this bucket holds.',
    bucket     SMALLINT NOT NULL COMMENT 'The bucket number, 0 to K-1 for a product split into K.',
    quantity   INT      NOT NULL COMMENT 'Units left in this bucket. Never negative (the CHECK below).',
    PRIMARY KEY (product_id, bucket),
    CONSTRAINT stock_bucket_quantity_not_negative CHECK (quantity >= 0),
    CONSTRAINT stock_bucket_number_valid CHECK (bucket >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
  COMMENT='Split stock for the bucketed strategy: K rows per product, each sold with its own row lock.';
