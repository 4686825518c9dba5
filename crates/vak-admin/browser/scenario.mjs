// The #/prompts page in headless Chromium, against a real `vak admin serve`.
//
// node scenario.mjs URL TOKEN HOME PROJECT SHOTS_DIR
//
// Logs in, switches scope, overrides a block and watches the live token
// count change, saves and sees the effective prompt change, gets a budget
// refusal (422) with the layers named, a conflict (409), resets, and opens
// the permissions view. Writes a screenshot per step into SHOTS_DIR. Exits
// non-zero on the first failed check.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';

const [url, token, home, project, shots, vak] = process.argv.slice(2);
if (!shots) {
  console.error('usage: node scenario.mjs URL TOKEN HOME PROJECT SHOTS_DIR');
  process.exit(2);
}
const origin = new URL(url).origin;
fs.mkdirSync(shots, { recursive: true });
const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'vak-admin-chromium-'));

let passed = 0;
let failed = 0;
function check(cond, what) {
  if (cond) {
    passed += 1;
    console.log('ok   ' + what);
  } else {
    failed += 1;
    console.log('FAIL ' + what);
    throw new Error(what);
  }
}

const FORBIDDEN = /\b(prevent\w*|block\w*|cannot)\b/i;
const offsite = [];

const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1360, height: 1000 },
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--disable-quic',
  ],
});
// The page must fetch nothing but this server: record and refuse the rest.
await context.route('**/*', (route) => {
  const u = route.request().url();
  if (u.startsWith(origin + '/')) return route.continue();
  offsite.push(u);
  return route.abort();
});
// Playwright's 30 s default is a wall-clock bound a loaded machine can trip: a wait fails only
// when the page truly never gets there.
context.setDefaultTimeout(90_000);
context.setDefaultNavigationTimeout(90_000);
const page = context.pages()[0] || (await context.newPage());
const consoleErrors = [];
page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
page.on('pageerror', (e) => consoleErrors.push(String(e)));

let shot = 0;
async function snap(name) {
  shot += 1;
  const file = path.join(shots, String(shot).padStart(2, '0') + '-' + name + '.png');
  await page.screenshot({ path: file, fullPage: true });
  console.log('     screenshot ' + file);
}

// Visible copy, without prompt text (which is the user's, not ours).
async function copyIsClean(where) {
  const text = await page.evaluate(() => {
    const clone = document.body.cloneNode(true);
    for (const n of clone.querySelectorAll('pre, textarea, .content, code, script, [hidden]')) n.remove();
    return clone.innerText;
  });
  const hit = text.match(FORBIDDEN);
  check(!hit, 'visible copy on ' + where + ' avoids prevent/block/cannot' + (hit ? ' (found "' + hit[0] + '")' : ''));
}

const card = (name) => page.locator('#cards article[data-name="' + name + '"]');
const effective = (name) => page.locator('#effective li[data-name="' + name + '"]');
const projectFile = (f) => path.join(project, '.vak', 'prompts', f);

try {
  // 1. Log in, from the keyboard.
  await page.goto(url);
  await page.locator('#view-login').waitFor({ state: 'visible' });
  await copyIsClean('the sign-in view');
  await snap('login');
  await page.locator('#token-input').focus();
  await page.keyboard.type('wrong-token-wrong-token');
  await page.keyboard.press('Enter');
  await page.locator('#login-error').filter({ hasText: 'token' }).waitFor();
  check(await page.locator('#view-login').isVisible(), 'a wrong token keeps the sign-in view and says why');
  await page.locator('#token-input').fill(token);
  await page.keyboard.press('Enter');
  await page.locator('#view-prompts').waitFor({ state: 'visible' });
  await card('identity').waitFor();
  check((await page.locator('#editing').innerText()).includes('This project'), 'signed in, editing This project');
  check(await page.evaluate(() => sessionStorage.getItem('vak-admin-token') !== null), 'the token is kept in sessionStorage');
  check((await card('identity').getAttribute('data-state')) === 'overridden', 'project identity is overridden (fixture has identity.md)');
  check((await card('operating-rules').getAttribute('data-state')) === 'inherited', 'project operating rules are inherited');
  check((await effective('operating-rules').innerText()).includes('from Shared'), 'effective operating-rules says "from Shared"');
  check((await effective('capability-contract').innerText()).includes('locked'), 'effective capability-contract says "locked"');
  check((await effective('guardrails').innerText()).includes('seed + Shared + 2'), 'effective guardrails says "seed + Shared + 2"');
  // The managed layer: shown read-only, marked "managed", nothing to edit.
  const managed = page.locator('#managed');
  await managed.waitFor({ state: 'visible' });
  check((await managed.locator('.badge').textContent()).trim() === 'managed', 'the managed card is marked "managed"');
  check((await managed.textContent()).includes('read-only'), 'the managed card says it is read-only');
  check((await managed.locator('button, textarea').count()) === 0, 'the managed card offers no editor, save or reset');
  check((await managed.textContent()).includes('surface-note (surface desktop)'), 'the managed card lists its file');
  await copyIsClean('#/prompts (This project)');
  await snap('prompts-this-project');

  // 2. Switch scope to Shared and back.
  await page.getByRole('button', { name: 'Shared', exact: true }).click();
  await page.locator('#editing').filter({ hasText: 'Shared' }).waitFor();
  check((await card('operating-rules').getAttribute('data-state')) === 'overridden', 'Shared operating rules are overridden (fixture home has operating-rules.md)');
  check((await card('identity').getAttribute('data-state')) === 'inherited', 'Shared identity is inherited from the seed');
  await snap('scope-shared');
  await page.locator('#sub-select').selectOption('surface/chat');
  await page.locator('#editing').filter({ hasText: 'surface/chat' }).waitFor();
  check((await card('surface-note').getAttribute('data-state')) === 'overridden', 'Shared surface/chat has its surface note');
  await snap('scope-shared-surface-chat');
  await page.locator('#sub-select').selectOption('base');
  check(await page.locator('#sub-select option[value^="dir/"]').count() === 0, 'Shared offers no directory layers');
  await page.getByRole('button', { name: 'This project', exact: true }).click();
  await page.locator('#editing').filter({ hasText: 'This project' }).waitFor();

  // 2b. A directory layer of the project (a monorepo's services/payments).
  await page.locator('#sub-select option[value="dir/services/payments"]').waitFor({ state: 'attached' });
  await page.locator('#sub-select').selectOption('dir/services/payments');
  await page.locator('#editing').filter({ hasText: 'dir/services/payments' }).waitFor();
  check((await card('guardrails').getAttribute('data-state')) === 'overridden', 'the directory layer has its own guardrails');
  await effective('guardrails').filter({ hasText: '2 directories' }).waitFor();
  check((await effective('guardrails').innerText()).includes('2 directories'), 'effective guardrails count both project directories');
  await snap('scope-project-directory');
  await page.locator('#sub-select').selectOption('base');
  await page.locator('#editing').filter({ hasText: 'This project' }).waitFor();

  // 3. Override operating rules in the project; watch the count change.
  const rules = card('operating-rules');
  await rules.locator('button.override').click();
  const textarea = rules.locator('textarea');
  await textarea.waitFor();
  check(await textarea.evaluate((t) => t === document.activeElement), 'the editor takes focus when opened');
  const count = rules.locator('.count');
  await page.waitForFunction((sel) => document.querySelector(sel)?.dataset.tokens, '#cards article[data-name="operating-rules"] .count');
  const before = Number(await count.getAttribute('data-tokens'));
  check(before > 0, 'live count shows the prefix tokens (' + before + ')');
  check((await count.innerText()).includes('/ 1,500 tokens'), 'live count is against the 1,500-token cap');
  check((await count.innerText()).includes('window'), 'live count names the model window');
  await textarea.press('End');
  await page.keyboard.press('Control+End');
  await page.keyboard.type('\n- Reply in British English, and say which files you read.');
  await page.waitForFunction(
    ([sel, n]) => { const c = document.querySelector(sel); return c && c.dataset.tokens && Number(c.dataset.tokens) !== n; },
    ['#cards article[data-name="operating-rules"] .count', before]);
  const after = Number(await count.getAttribute('data-tokens'));
  check(after > before, 'the count went up as I typed (' + before + ' -> ' + after + ')');
  await snap('override-live-count');

  // 4. Save with Ctrl+Enter; the effective prompt changes.
  await textarea.press('Control+Enter');
  await page.locator('#cards article[data-name="operating-rules"][data-state="overridden"]').waitFor();
  await effective('operating-rules').filter({ hasText: 'from This project' }).waitFor();
  check(fs.readFileSync(projectFile('operating-rules.md'), 'utf8').includes('British English'), 'the save reached operating-rules.md on disk');
  // The focus moves once the re-render is done; a loaded machine may be
  // slower to get there than to show the effective text.
  await page.waitForFunction(() => document.activeElement?.closest('article')?.dataset.name === 'operating-rules', null, { timeout: 15000 }).catch(() => {});
  check(await page.evaluate(() => document.activeElement?.closest('article')?.dataset.name) === 'operating-rules', 'keyboard focus returns to the saved card');
  await effective('operating-rules').locator('summary').click();
  check((await effective('operating-rules').innerText()).includes('British English'), 'the effective prompt shows the new text');
  const tokensNow = await page.locator('#effective-tokens').innerText();
  check(tokensNow.startsWith(after.toLocaleString('en-US')), 'effective token total matches the live count (' + tokensNow + ')');
  await copyIsClean('#/prompts after a save');
  await snap('saved-effective-changed');

  // 5. A huge guardrail: the count goes over, the save is refused (422).
  const guard = card('guardrails');
  const guardBefore = fs.readFileSync(projectFile('guardrails.md'), 'utf8');
  await guard.locator('button.override').click();
  await guard.locator('textarea').waitFor();
  check((await guard.locator('.guard-note').innerText()).includes('instruct the model'), 'the guardrail editor says guardrails instruct the model');
  check((await guard.locator('.guard-note a').getAttribute('href')) === '#/permissions', 'the guardrail editor links to #/permissions');
  const huge = Array.from({ length: 400 }, (_, i) => '- Before touching service ' + i + ', read its runbook and confirm the owner.').join('\n');
  await guard.locator('textarea').fill(guardBefore + huge + '\n');
  await guard.locator('.count.over').waitFor();
  check((await guard.locator('.count').innerText()).includes('a save would be refused'), 'the live count says the save would be refused');
  await snap('guardrail-over-cap-live');
  await guard.locator('button.save').click();
  await guard.locator('.result.refused').waitFor();
  const refusal = await guard.locator('.result').innerText();
  check(refusal.includes('Save refused') && refusal.includes('cap'), 'the refusal is shown plainly');
  check(refusal.includes('This project (project)'), 'the refusal names the project layer');
  check(refusal.includes('guardrails.md'), 'the refusal names the file with its count');
  check(fs.readFileSync(projectFile('guardrails.md'), 'utf8') === guardBefore, 'the refused save left guardrails.md unchanged');
  await copyIsClean('#/prompts with a refusal');
  await snap('guardrail-save-refused-422');
  await guard.locator('button.cancel').click();

  // 6. Someone else saves meanwhile: 409, shown plainly.
  const identity = card('identity');
  await identity.locator('button.override').click();
  await identity.locator('textarea').waitFor();
  fs.writeFileSync(projectFile('identity.md'), 'You are Vak, edited in another window.\n');
  await identity.locator('textarea').fill('You are Vak, edited here.');
  await identity.locator('button.save').click();
  await identity.locator('.result.conflict').waitFor();
  check((await identity.locator('.result').innerText()).includes('Someone else changed this'), 'a conflict is shown plainly');
  check(fs.readFileSync(projectFile('identity.md'), 'utf8').includes('another window'), 'the conflicting save did not overwrite the other edit');
  await snap('conflict-409');
  await identity.locator('.result button').click();
  await effective('identity').filter({ hasText: 'from This project' }).waitFor();

  // 7. Reset operating rules: the file goes, the block inherits again.
  await card('operating-rules').locator('button.reset').click();
  await card('operating-rules').locator('button.confirm-reset').press('Enter');
  await page.locator('#cards article[data-name="operating-rules"][data-state="inherited"]').waitFor();
  await effective('operating-rules').filter({ hasText: 'from Shared' }).waitFor();
  check(!fs.existsSync(projectFile('operating-rules.md')), 'reset deleted operating-rules.md');
  await snap('reset-inherits-again');

  // 7b. History: the save and the reset are versions; diff any two; revert.
  const rulesCard = card('operating-rules');
  await rulesCard.locator('button.view-history').click();
  await rulesCard.locator('table.versions tbody tr').first().waitFor();
  const rows = await rulesCard.locator('table.versions tbody tr').count();
  check(rows === 2, 'the history lists the save and the reset (' + rows + ' versions)');
  const historyText = await rulesCard.locator('table.versions').innerText();
  check(historyText.includes('reset') && historyText.includes('save'), 'the history names each change');
  check(historyText.includes('admin-token:'), 'the history says who: the admin token\u2019s id');
  await rulesCard.locator('pre.diff').waitFor();
  check((await rulesCard.locator('pre.diff').innerText()).includes('-- Reply in British English'), 'the default diff is the last change (the reset removed the text)');
  const options = await rulesCard.locator('select.diff-from option').count();
  check(options >= 2, 'the diff can pick from any recorded version (' + options + ')');
  await rulesCard.locator('select.diff-from').selectOption({ index: 0 });
  await rulesCard.locator('select.diff-to').selectOption({ index: 1 });
  await rulesCard.locator('button.show-diff').click();
  await rulesCard.locator('pre.diff .add').first().waitFor();
  check((await rulesCard.locator('pre.diff').innerText()).includes('+- Reply in British English'), 'a diff between two chosen versions shows the added lines');
  await copyIsClean('#/prompts with a history open');
  await snap('history-and-diff');
  await rulesCard.locator('button.revert').first().click();
  await page.locator('#cards article[data-name="operating-rules"][data-state="overridden"]').waitFor();
  check(fs.readFileSync(projectFile('operating-rules.md'), 'utf8').includes('British English'), 'revert saved the old version back to operating-rules.md');
  await effective('operating-rules').filter({ hasText: 'from This project' }).waitFor();
  await card('operating-rules').locator('button.view-history').click();
  await card('operating-rules').locator('table.versions tbody tr').nth(2).waitFor();
  check((await card('operating-rules').locator('table.versions tbody tr').first().innerText()).includes('revert'), 'the revert is the newest version');
  await snap('history-reverted');

  // 7c. A revert refused by the budget: the same 422 as a save, nothing written.
  const shared = path.join(home, '.vak', 'config.toml');
  const sharedConfig = fs.readFileSync(shared, 'utf8');
  fs.writeFileSync(shared, sharedConfig.replace(/max_tokens\s*=\s*\d+/, 'max_tokens = 300'));
  await card('operating-rules').locator('button.reset').click();
  await card('operating-rules').locator('button.confirm-reset').press('Enter');
  await page.locator('#cards article[data-name="operating-rules"][data-state="inherited"]').waitFor();
  await card('operating-rules').locator('button.view-history').click();
  await card('operating-rules').locator('table.versions tbody tr').nth(3).waitFor();
  await card('operating-rules').locator('button.revert').first().click();
  await card('operating-rules').locator('.result.refused').waitFor();
  check((await card('operating-rules').locator('.result').innerText()).includes('Revert refused'), 'a revert over the cap is refused like a save (same 422, same figures)');
  check(!fs.existsSync(projectFile('operating-rules.md')), 'the refused revert wrote nothing');
  await snap('revert-refused-over-cap');
  fs.writeFileSync(shared, sharedConfig);

  // 7d. The trust preview on an untrusted project: nothing written.
  execFileSync(vak, ['untrust', '--home', home, project]);
  const trustBefore = fs.readFileSync(path.join(home, '.vak', 'trust.toml'), 'utf8');
  await page.getByRole('button', { name: 'Shared', exact: true }).click();
  await page.locator('#editing').filter({ hasText: 'Shared' }).waitFor();
  await page.getByRole('button', { name: 'This project', exact: true }).click();
  await page.locator('#trust-note button.preview-trust').waitFor();
  await page.locator('#trust-note button.preview-trust').click();
  await page.locator('#trust-note .trust-preview h3').waitFor();
  const preview = await page.locator('#trust-note .trust-preview').innerText();
  check(preview.includes('identity would be replaced'), 'the trust preview shows the identity trusting would apply');
  check(preview.includes('tokens (cap'), 'the trust preview shows the prefix tokens before and after against the cap');
  check(/Elsewhere, agent-instructions would be \w+ \(on the chain for [^)]*agent `reviewer`/.test(preview), 'the trust preview shows what trusting changes on other chains (a role)');
  check(fs.readFileSync(path.join(home, '.vak', 'trust.toml'), 'utf8') === trustBefore, 'the preview wrote nothing to the trust store');
  await copyIsClean('#/prompts with the trust preview');
  await snap('trust-preview-untrusted');
  execFileSync(vak, ['trust', '--home', home, project]);

  // 8. View source, then the permissions view from a guardrail editor.
  await card('guardrails').locator('button.view-source').click();
  await card('guardrails').locator('.source pre').first().waitFor();
  await snap('view-source');
  await card('guardrails').locator('button.override').click();
  await card('guardrails').locator('.guard-note a').click();
  await page.locator('#view-permissions').waitFor({ state: 'visible' });
  await page.locator('#permissions table').first().waitFor();
  const perms = await page.locator('#permissions').innerText();
  check(perms.includes('edit_file:infra/*') && perms.includes('config.toml'), 'permissions list the project deny rule and where it came from');
  check(perms.includes('read_file:*'), 'permissions list the shared allow rules');
  await copyIsClean('#/permissions');
  await snap('permissions');

  // 9. Gateway tiers and audit render.
  await page.getByRole('link', { name: 'Gateway' }).click();
  await page.locator('#gateway .bot').first().waitFor();
  check((await page.locator('#gateway').innerText()).includes('helpdesk'), 'the gateway view lists the helpdesk bot');
  await copyIsClean('#/gateway');
  await snap('gateway');
  const botNote = page.locator('#gateway section[aria-label="Bot helpdesk"] > .bot-grid article[data-name="surface-note"]');
  check((await botNote.getAttribute('data-state')) === 'inherited', 'the helpdesk bot surface note is inherited');
  const deliver = (text) => execFileSync(vak, ['gateway', 'deliver', '--home', home, '--project', project, '--bot', 'helpdesk', '--chat', '42', '--text', text]);
  deliver('hello before the edit');
  await botNote.locator('button.override').click();
  await botNote.locator('textarea').fill('Answers go to the whole platform team; sign them "Helpdesk".');
  await page.waitForFunction((sel) => document.querySelector(sel)?.dataset.tokens, '#gateway section[aria-label="Bot helpdesk"] > .bot-grid article[data-name="surface-note"] .count');
  await botNote.locator('button.save').click();
  await page.locator('#gateway section[aria-label="Bot helpdesk"] > .bot-grid article[data-name="surface-note"][data-state="overridden"]').waitFor();
  const bots = JSON.parse(fs.readFileSync(path.join(home, '.vak', 'gateway', 'bots.json'), 'utf8'));
  check(bots.helpdesk.prompts['surface-note'].includes('whole platform team'), 'the bot-tier save reached bots.json');
  check(bots.helpdesk.display_name === 'Helpdesk' && bots.helpdesk.prompts.guardrails.length > 0, 'bots.json kept its other keys');
  await snap('gateway-bot-saved');
  // The bot key's history: the save is a version of its key.
  const savedNote = page.locator('#gateway section[aria-label="Bot helpdesk"] > .bot-grid article[data-name="surface-note"]');
  await savedNote.locator('button.view-history').click();
  await savedNote.locator('table.versions').waitFor();
  const keyHistory = await savedNote.locator('.history').innerText();
  check((await savedNote.locator('table.versions tbody tr').count()) === 1, 'the bot key\u2019s history lists its one save');
  check(keyHistory.includes('admin-token:') && keyHistory.includes('save'), 'the bot key\u2019s history says what and who');
  await savedNote.locator('.diff-out pre.diff').first().waitFor();
  check((await savedNote.locator('.diff-out').innerText()).includes('whole platform team'), 'the bot key\u2019s diff shows the text the save added');
  await copyIsClean('#/gateway with a key history open');
  await snap('gateway-key-history');
  deliver('hello after the edit');
  await page.getByRole('link', { name: 'Audit' }).click();
  await page.locator('#audit p, #audit table').first().waitFor();
  await copyIsClean('#/audit');
  await snap('audit');

  // 9b. Behind the rotation's config-change event: the text diff.
  await page.locator('#audit button.show-rotation-diff').first().click();
  await page.locator('#audit tr.rotation-diff pre.diff').first().waitFor();
  const rotation = await page.locator('#audit tr.rotation-diff').first().innerText();
  check(rotation.includes('whole platform team'), 'the config-change event shows the text the edit added');
  await copyIsClean('#/audit with a rotation diff');
  await snap('audit-rotation-diff');

  check(offsite.length === 0, 'the page fetched nothing but this server' + (offsite.length ? ' (' + offsite.join(', ') + ')' : ''));
  // The 401/409/422 answers the scenario provokes are logged by Chromium as
  // failed loads; anything else is a script error.
  const scriptErrors = consoleErrors.filter((e) => !e.includes('Failed to load resource'));
  check(scriptErrors.length === 0, 'no script errors in the console' + (scriptErrors.length ? ' (' + scriptErrors.join(' | ') + ')' : ''));
} catch (err) {
  if (failed === 0) {
    failed += 1;
    console.log('FAIL ' + (err && err.message ? err.message.split('\n')[0] : String(err)));
  }
  try { await snap('failure'); } catch (e) { /* the page may be gone */ }
} finally {
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
console.log(passed + ' passed, ' + failed + ' failed');
process.exit(failed === 0 ? 0 : 1);
