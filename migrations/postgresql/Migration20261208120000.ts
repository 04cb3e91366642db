import { Migration } from '@mikro-orm/migrations';

/** The autovacuum settings of the tables the dispatcher drains (as Migration20261201230000 gives saga_timer and saga_outbox). */
const SETTINGS =
  'autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000';

/**
 * Creates `saga_inbox` on PostgreSQL: the deliveries an application stages for its sagas in its own transactions
 * (`SagaRuntime.stageDelivery`). `order_key` is a `bigserial` (a sequence of cache 1, so values grow in the order they
 * are taken): a stager takes the saga key's advisory lock before its row takes one, so the rows of one saga are
 * numbered in commit order. Autovacuum cleans and analyzes it as soon as the other two dispatch tables.
 */
export class Migration20261208120000 extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table "saga_inbox" ("order_key" bigserial primary key, "id" uuid not null, "saga_type" varchar(100) not null, "saga_key" text not null, "message_type" varchar(200) not null, "payload" jsonb not null, "message_id" varchar(200) null, "correlation_id" varchar(200) null, "available_at" timestamptz not null, "token" uuid not null, "locked_until" timestamptz null, "delivery_started_at" timestamptz null, "attempts" int not null default 0, "last_error" text null, "dispatched_at" timestamptz null, "outcome" varchar(20) null, "dead_lettered_at" timestamptz null, "dead_letter_reason" text null, "created_at" timestamptz not null, "trace_context" text null);`,
    );
    this.addSql(`create unique index "saga_inbox_id_uniq" on "saga_inbox" ("id");`);
    this.addSql(`create index "saga_inbox_claim_idx" on "saga_inbox" ("available_at", "id") where "dispatched_at" is null;`);
    this.addSql(`create index "saga_inbox_saga_key_idx" on "saga_inbox" ("saga_type", "saga_key", "order_key") where "outcome" is null;`);
    this.addSql(`create index "saga_inbox_dispatched_at_idx" on "saga_inbox" ("dispatched_at");`);
    this.addSql(`alter table "saga_inbox" set (${SETTINGS});`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists "saga_inbox" cascade;`);
  }
}
