-- How firmly each card's slices hold (hard, soft, none), said on every page; 'enforced' stays for
-- servers of the previous version sharing the database during a rolling update.
ALTER TABLE gpus ADD COLUMN hold TEXT NOT NULL DEFAULT 'none';
