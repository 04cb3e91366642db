import { Migration } from '@mikro-orm/migrations';

export class Migration20250101000000 extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table \`customer\` (\`id\` text not null, \`name\` text not null, primary key (\`id\`));`);
  }
}
