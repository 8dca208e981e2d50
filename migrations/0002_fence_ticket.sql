-- The ticket dispenser of the `fence-only` control strategy (issue 7): a fence with no
-- lock in front of it. Each request takes a ticket, claims the product with it in
-- stock_fence (only if it is newer than every earlier claim), and writes stock only
-- while its claim is still the newest. Safe with no lock at all; the lock strategies
-- are then measured by how many requests they spare from being refused.
--
-- A SEQUENCE hands out strictly increasing numbers on one server. Its cache (1000 by
-- default) only means numbers may jump forward after a crash, never back, which is
-- all a fencing token needs.
CREATE SEQUENCE fence_ticket START WITH 1 INCREMENT BY 1
  COMMENT = 'Fencing tickets for the fence-only strategy: strictly increasing, never reused.';
