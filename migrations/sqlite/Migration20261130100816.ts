import { Migration } from '@mikro-orm/migrations';

/** Creates `saga_handled_message`, the message ids each saga instance has handled, on SQLite. */
export class Migration20261130100816 extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table \`saga_handled_message\` (\`id\` text not null, \`saga_type\` text not null, \`saga_id\` text not null, \`message_id\` text not null, \`version\` integer not null, \`processed_at\` datetime not null, primary key (\`id\`));`,
    );
    this.addSql(`create index \`saga_handled_message_processed_at_idx\` on \`saga_handled_message\` (\`processed_at\`);`);
    this.addSql(
      `create unique index \`saga_handled_message_uniq\` on \`saga_handled_message\` (\`saga_type\`, \`saga_id\`, \`message_id\`);`,
    );
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists `saga_handled_message`;');
  }
}
