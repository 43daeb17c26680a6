"""Two realistic sessions for the write link's end-to-end proof (issue #29, must-show 2): 40 messages
in English and 40 in Chinese between a user and an assistant, with the assistant's tool calls and
their results. Each holds a name, a preference and its correction, a plan with a relative date, a
tool that keeps failing the same way, and secrets of shapes the redaction rules know.

The passwords are given as an assignment ("password: …", "密码：…") and stated in prose ("the old
staging password was …", "旧密码是…"): both must be redacted in every file, the buffer included.

Both sessions start on Monday 16 November 2026, so "next Friday" is 20 November (the first Friday
after the message) and 下周五 is 27 November (Friday of the week after).
"""

from __future__ import annotations

from datetime import datetime, timedelta

START = datetime(2026, 11, 16, 9, 0, 0)  # a Monday
OPENAI_KEY = "sk-Zr7Qw2Lm9Xc4Vb8Nt1Ke5Hy3Pd6Gf0Ja2Su7Wi4Ro9Ex1Ty"
DB_PASSWORD = "Gr4nite!Harbor-27"
GITHUB_TOKEN = "ghp_R2d9Kx7Qm4Lw8Zc1Vn6Bt3Hy5Jp0Sf2Ga7Ue"
ZH_KEY = "sk-Mb5Tn8Qc2Wx7Lz4Kd9Vr1Hs6Pf3Gy0Je8Ua5Oi2Nt"
ZH_PASSWORD = "Lan7shan@Hu-2026"
STATED_PASSWORD = "Tide-42Lantern"
ZH_STATED_PASSWORD = "Qiao9men#Lu"
SECRETS = (OPENAI_KEY, DB_PASSWORD, GITHUB_TOKEN, ZH_KEY, ZH_PASSWORD, STATED_PASSWORD, ZH_STATED_PASSWORD)

ENGLISH_SPEAKER = "Priya"
ENGLISH = [
    ("e01", "user", "Hi! My name is Priya Raman. I just joined the data platform team at Northwind as a data "
                    "engineer."),
    ("e02", "assistant", "Welcome, Priya! I can help you get set up. What would you like to start with?"),
    ("e03", "user", "I moved to Rotterdam last month, so everything is new. Let's start with the weekly reports "
                    "my manager wants."),
    ("e04", "assistant", "Sure. Where do the reports come from, and who reads them?"),
    ("e05", "user", "They come from the analytics database. My manager Joost reads them every Monday morning."),
    ("e06", "assistant", "Got it. How would you like me to send you the daily summaries while you build them?"),
    ("e07", "user", "I prefer my daily summary as a long email in the evening."),
    ("e08", "assistant", "Noted: a long email every evening. Let me look at the database first."),
    ("e09", "tool", "db_query failed: connection to analytics-db-01.northwind.internal:5432 timed out after 30 "
                    "seconds"),
    ("e10", "assistant", "The analytics database did not answer. I will try the replica."),
    ("e11", "tool", "db_query failed: connection to analytics-db-02.northwind.internal:5432 timed out after 30 "
                    "seconds"),
    ("e12", "user", "Oh, the database is only reachable over the VPN. Here is the staging API key so you can use "
                    f"the HTTP endpoint instead: {OPENAI_KEY}"),
    ("e13", "assistant", "Thanks. I will not store that key anywhere; I will use it only for this session."),
    ("e14", "tool", "db_query failed: connection to analytics-db-03.northwind.internal:5432 timed out after 30 "
                    "seconds"),
    ("e15", "assistant", "The direct connection fails every time. Lesson learned: the analytics database times "
                         "out from outside the VPN, so next time use the reporting API first."),
    ("e16", "user", "Makes sense. The reporting database login is reporting_ro, password: " + DB_PASSWORD
                    + " if you need it."),
    ("e17", "assistant", "I'd rather not keep passwords. Could you put it in the team vault instead?"),
    ("e18", "user", "Sure, I'll move it to the vault this afternoon. The old staging password was "
                    + STATED_PASSWORD + " by the way."),
    ("e19", "tool", f"env: GITHUB_TOKEN={GITHUB_TOKEN} PATH=/usr/local/bin:/usr/bin"),
    ("e20", "assistant", "Careful: that environment dump shows a GitHub token. You should rotate it."),
    ("e21", "user", "Ugh, thanks. I rotated the token just now."),
    ("e22", "assistant", "Good. Shall we plan the next steps for the reports?"),
    ("e23", "user", "Yes. Next Friday I'm going to present the reporting migration plan to the architecture "
                    "board."),
    ("e24", "assistant", "Great. Do you want slides or a written proposal?"),
    ("e25", "user", "A short written proposal. The board reads documents, not slides."),
    ("e26", "assistant", "Understood. I will draft the proposal outline today."),
    ("e27", "user", "Actually, I prefer the daily summary as a short Slack message, not a long email."),
    ("e28", "assistant", "Changed: a short Slack message each day instead of the long email."),
    ("e29", "user", "My sister Ananya is visiting from Chennai this weekend, so I'll be offline on Saturday."),
    ("e30", "assistant", "Enjoy the visit. I will hold everything until Monday."),
    ("e31", "user", "I love cycling to the office along the Maas, even in the rain."),
    ("e32", "assistant", "That sounds lovely. Should I check the weather before your commute?"),
    ("e33", "user", "No need, I check it myself."),
    ("e34", "assistant", "All right. The proposal outline is ready for your review."),
    ("e35", "user", "We decided to keep the old dashboards running until the migration is finished."),
    ("e36", "assistant", "Makes sense. I will note that in the proposal's risks section."),
    ("e37", "user", "I'm allergic to peanuts, by the way, in case you order lunch for the board meeting."),
    ("e38", "assistant", "Noted. I will make sure the catering is peanut-free."),
    ("e39", "user", "Thanks, that's all for today."),
    ("e40", "assistant", "You're welcome, Priya. Talk tomorrow."),
]

CHINESE_SPEAKER = "王磊"
CHINESE = [
    ("c01", "user", "你好，我叫王磊，在杭州一家物流公司做后端开发。"),
    ("c02", "assistant", "你好王磊！今天想让我帮你做什么？"),
    ("c03", "user", "我们组在把订单系统从单体拆成微服务，我负责库存服务。"),
    ("c04", "assistant", "明白了。库存服务现在用的是什么数据库？"),
    ("c05", "user", "用的是MySQL，主库在阿里云上。"),
    ("c06", "assistant", "好的。你希望我怎么给你发每天的进度汇总？"),
    ("c07", "user", "我更喜欢每天晚上用邮件发一份详细的汇总。"),
    ("c08", "assistant", "好的，每天晚上发详细邮件。我先看看库存表的结构。"),
    ("c09", "tool", "查询失败：连接 inventory-db-01.wl.internal:3306 超时（30秒）"),
    ("c10", "assistant", "主库连不上，我试一下只读副本。"),
    ("c11", "tool", "查询失败：连接 inventory-db-02.wl.internal:3306 超时（30秒）"),
    ("c12", "user", f"数据库只能在公司内网访问。你先用测试环境的接口吧，密钥是 {ZH_KEY}"),
    ("c13", "assistant", "收到，这个密钥我只在本次会话里用，不会保存。"),
    ("c14", "tool", "查询失败：连接 inventory-db-03.wl.internal:3306 超时（30秒）"),
    ("c15", "assistant", "直连数据库每次都超时。教训是：在内网之外不要直连数据库，下次先用测试环境的接口。"),
    ("c16", "user", f"测试库的账号是 test_ro，密码：{ZH_PASSWORD}，你需要的话可以用。"),
    ("c17", "assistant", "密码最好不要发给我，建议放进团队的密码库。"),
    ("c18", "user", f"好的，我下午就放进去。旧密码是{ZH_STATED_PASSWORD}，也一起放。"),
    ("c19", "assistant", "库存表有三张：库存、预占和流水。"),
    ("c20", "user", "流水表的数据量很大，已经有两亿行了。"),
    ("c21", "assistant", "那迁移的时候需要分批同步。"),
    ("c22", "user", "对，我打算下周五在技术评审会上讲库存服务的拆分方案。"),
    ("c23", "assistant", "好的。需要我帮你准备评审材料吗？"),
    ("c24", "user", "要的，先帮我列个提纲。"),
    ("c25", "assistant", "提纲已经列好：背景、拆分边界、数据迁移、回滚方案、风险。"),
    ("c26", "user", "其实我更喜欢每天早上用钉钉发一条简短的汇总，不是晚上的邮件。"),
    ("c27", "assistant", "改好了：以后每天早上在钉钉上发简短汇总。"),
    ("c28", "user", "我妹妹王芳下个月从成都来杭州看我。"),
    ("c29", "assistant", "太好了，到时候提醒你安排时间。"),
    ("c30", "user", "我喜欢周末去西湖边跑步。"),
    ("c31", "assistant", "听起来很不错。"),
    ("c32", "user", "我们决定先保留旧的库存接口，等新服务稳定了再下线。"),
    ("c33", "assistant", "好的，我在方案的风险部分写上这一点。"),
    ("c34", "user", "另外我对花生过敏，评审会如果订午饭要注意。"),
    ("c35", "assistant", "记住了，订餐时会避开花生。"),
    ("c36", "user", "预占表的过期清理任务上周出过一次故障。"),
    ("c37", "assistant", "我把这次故障写进风险部分。"),
    ("c38", "user", "谢谢，今天就到这里吧。"),
    ("c39", "assistant", "好的王磊，明天见。"),
    ("c40", "user", "明天见。"),
]

# the assistant's failing tool, as GenericAgent's plugin reports each call to `memctl tools record`
TOOL_CALLS = {
    "english": [("e09", "db_query", {"host": "analytics-db-01.northwind.internal", "port": 5432}, "e09"),
                ("e11", "db_query", {"host": "analytics-db-02.northwind.internal", "port": 5432}, "e11"),
                ("e14", "db_query", {"host": "analytics-db-03.northwind.internal", "port": 5432}, "e14"),
                ("e19", "shell", {"command": "env"}, "")],
    "chinese": [("c09", "sql_query", {"host": "inventory-db-01.wl.internal", "port": 3306}, "c09"),
                ("c11", "sql_query", {"host": "inventory-db-02.wl.internal", "port": 3306}, "c11"),
                ("c14", "sql_query", {"host": "inventory-db-03.wl.internal", "port": 3306}, "c14")],
}


def messages(session: list[tuple[str, str, str]], speaker: str) -> list[dict]:
    """The session as `memctl turn` reads it: a minute between messages from START."""
    out = []
    for number, (message_id, role, content) in enumerate(session):
        message = {"id": message_id, "role": role, "content": content,
                   "time": (START + timedelta(minutes=number)).isoformat()}
        if role == "user":
            message["speaker"] = speaker
        out.append(message)
    return out


def tool_events(language: str, session: str) -> list[dict]:
    """Each tool call as the plugin records it: the tool, its arguments, its result, the call's id."""
    by_id = {message_id: content for message_id, _role, content in (ENGLISH + CHINESE)}
    events = []
    for message_id, tool, args, _ in TOOL_CALLS[language]:
        result = by_id[message_id]
        failed = "failed" in result or "失败" in result
        event = {"tool": tool, "args": args, "session": session, "call": f"call-{message_id}",
                 "time": START.isoformat()}
        event.update({"ok": False, "error": result} if failed else {"ok": True, "result": result})
        events.append(event)
    return events
