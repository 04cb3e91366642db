import { Migration } from '@mikro-orm/migrations';

/** Creates the library tables `saga_timer` and `saga_outbox` on PostgreSQL. */
export class Migration20261130063251 extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table "saga_outbox" ("id" uuid not null, "saga_type" varchar(100) not null, "saga_id" uuid not null, "message_type" varchar(200) not null, "payload" jsonb not null, "headers" jsonb not null, "correlation_id" varchar(200) null, "available_at" timestamptz not null, "token" uuid not null, "locked_until" timestamptz null, "attempts" int not null default 0, "last_error" text null, "dispatched_at" timestamptz null, "outcome" varchar(20) null, "dead_lettered_at" timestamptz null, "dead_letter_reason" text null, "created_at" timestamptz not null, constraint "saga_outbox_pkey" primary key ("id"));`,
    );
    this.addSql(`create index "saga_outbox_dispatched_at_idx" on "saga_outbox" ("dispatched_at");`);
    this.addSql(`create index "saga_outbox_due_idx" on "saga_outbox" ("available_at") where "dispatched_at" is null;`);

    this.addSql(
      `create table "saga_timer" ("id" uuid not null, "saga_type" varchar(100) not null, "saga_id" uuid not null, "name" varchar(200) not null, "step" varchar(100) null, "due_at" timestamptz not null, "available_at" timestamptz not null, "message_type" varchar(200) not null, "payload" jsonb not null, "calendar_key" varchar(100) null, "correlation_id" varchar(200) null, "token" uuid not null, "locked_until" timestamptz null, "attempts" int not null default 0, "last_error" text null, "dispatched_at" timestamptz null, "outcome" varchar(20) null, "dead_lettered_at" timestamptz null, "dead_letter_reason" text null, "created_at" timestamptz not null, constraint "saga_timer_pkey" primary key ("id"));`,
    );
    this.addSql(`create index "saga_timer_dispatched_at_idx" on "saga_timer" ("dispatched_at");`);
    this.addSql(`create index "saga_timer_due_idx" on "saga_timer" ("available_at") where "dispatched_at" is null;`);
    this.addSql(
      `create unique index "saga_timer_pending_name_uniq" on "saga_timer" ("saga_type", "saga_id", "name") where "dispatched_at" is null;`,
    );
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists "saga_timer";');
    this.addSql('drop table if exists "saga_outbox";');
  }
}
