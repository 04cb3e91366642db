import { Migration } from '@mikro-orm/migrations';

/** Creates `saga_handled_message`, the message ids each saga instance has handled, on PostgreSQL. */
export class Migration20261130100809 extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table "saga_handled_message" ("id" uuid not null, "saga_type" varchar(100) not null, "saga_id" uuid not null, "message_id" varchar(200) not null, "version" int not null, "processed_at" timestamptz not null, constraint "saga_handled_message_pkey" primary key ("id"));`,
    );
    this.addSql(`create index "saga_handled_message_processed_at_idx" on "saga_handled_message" ("processed_at");`);
    this.addSql(
      `alter table "saga_handled_message" add constraint "saga_handled_message_uniq" unique ("saga_type", "saga_id", "message_id");`,
    );
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists "saga_handled_message" cascade;`);
  }
}
