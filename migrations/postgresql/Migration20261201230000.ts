import { Migration } from '@mikro-orm/migrations';

/** The autovacuum settings of the two tables the dispatcher drains (see docs/migrations.md, "Autovacuum"). */
const SETTINGS = {
  autovacuum_vacuum_scale_factor: '0.02',
  autovacuum_vacuum_threshold: '1000',
  autovacuum_analyze_scale_factor: '0.02',
  autovacuum_analyze_threshold: '1000',
} as const;

const TABLES = ['saga_timer', 'saga_outbox'] as const;

/**
 * Vacuums and analyzes `saga_timer` and `saga_outbox` once 2% of their rows (and at least 1,000) changed, instead of
 * PostgreSQL's 20% and 10%. Every delivered row leaves dead row versions and a dead entry in its table's pending
 * claim index, which every claim (an empty pass's too) reads past until VACUUM removes it; and a burst of pending
 * rows is planned on statistics that still say few rows are pending until ANALYZE. PostgreSQL only: SQLite has no
 * autovacuum settings (and no dead row versions).
 */
export class Migration20261201230000 extends Migration {
  override async up(): Promise<void> {
    const settings = Object.entries(SETTINGS)
      .map(([name, value]) => `${name} = ${value}`)
      .join(', ');
    for (const table of TABLES) this.addSql(`alter table "${table}" set (${settings});`);
  }

  override async down(): Promise<void> {
    for (const table of TABLES) this.addSql(`alter table "${table}" reset (${Object.keys(SETTINGS).join(', ')});`);
  }
}
