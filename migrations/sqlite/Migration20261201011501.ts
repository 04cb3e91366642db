import { Migration } from '@mikro-orm/migrations';

/**
 * Replaces the pending rows' index on `(available_at)` by one on `(available_at, id)`: a claim (`order by available_at,
 * id limit n`) then reads the index in order and stops after n rows, instead of sorting every due row.
 */
export class Migration20261201011501 extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create index "saga_outbox_claim_idx" on "saga_outbox" ("available_at", "id") where "dispatched_at" is null;`);
    this.addSql(`drop index "saga_outbox_due_idx";`);

    this.addSql(`create index "saga_timer_claim_idx" on "saga_timer" ("available_at", "id") where "dispatched_at" is null;`);
    this.addSql(`drop index "saga_timer_due_idx";`);
  }

  override async down(): Promise<void> {
    this.addSql(`create index "saga_outbox_due_idx" on "saga_outbox" ("available_at") where "dispatched_at" is null;`);
    this.addSql(`drop index "saga_outbox_claim_idx";`);

    this.addSql(`create index "saga_timer_due_idx" on "saga_timer" ("available_at") where "dispatched_at" is null;`);
    this.addSql(`drop index "saga_timer_claim_idx";`);
  }
}
