import { Migration } from '@mikro-orm/migrations';

/** Adds `delivery_started_at` to `saga_timer` and `saga_outbox`: a lost lease is charged only to a delivery that started. */
export class Migration20261130101137 extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table "saga_outbox" add column "delivery_started_at" timestamptz null;`);

    this.addSql(`alter table "saga_timer" add column "delivery_started_at" timestamptz null;`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table "saga_outbox" drop column "delivery_started_at";`);

    this.addSql(`alter table "saga_timer" drop column "delivery_started_at";`);
  }
}
