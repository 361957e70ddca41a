//! Kafka's SslPrincipalMapperTest, case for case, plus the edges of Java's replacement syntax.
use super::*;

fn mapper(rules: &str) -> SslPrincipalMapper {
    SslPrincipalMapper::from_rules(Some(rules)).unwrap_or_else(|e| panic!("{rules}: {e}"))
}

#[test]
fn valid_rules() {
    for rules in [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ] {
        mapper(rules);
    }
}

#[test]
fn invalid_rules() {
    for rules in [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ] {
        assert!(
            SslPrincipalMapper::from_rules(Some(rules)).is_err(),
            "{rules} should be refused"
        );
    }
}

#[test]
fn ssl_principal_mapper() {
    let rules = [
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]
    .join(", ");
    let m = mapper(&rules);
    assert_eq!(m.name("CN=Duke,OU=ServiceUsers,O=Org,C=US").unwrap(), "duke");
    assert_eq!(
        m.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US").unwrap(),
        "duke@sme"
    );
    assert_eq!(m.name("cn=duke,ou=sme,dc=mycp,dc=com").unwrap(), "DUKE@SME");
    assert_eq!(m.name("cN=duke,OU=JavaSoft,O=Sun Microsystems").unwrap(), "DUKE");
    assert_eq!(
        m.name("OU=JavaSoft,O=Sun Microsystems,C=US").unwrap(),
        "OU=JavaSoft,O=Sun Microsystems,C=US"
    );
}

fn splits(expected: &str, rules: &str) {
    assert_eq!(
        mapper(rules).to_string(),
        format!("SslPrincipalMapper(rules = {expected})"),
        "{rules}"
    );
}

#[test]
fn rules_splitting() {
    splits("[]", "");
    splits("[DEFAULT]", "DEFAULT");
    splits("[RULE:/]", "RULE://");
    splits("[RULE:/.*]", "RULE:/.*/");
    splits("[RULE:/.*/L]", "RULE:/.*/L");
    splits("[RULE:/, DEFAULT]", "RULE://,DEFAULT");
    splits("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  ");
    splits("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  ");
    splits("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  ");
    splits(
        "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
        "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
    );
    // empty rules are ignored
    splits("[]", ",   , , ,      , , ,   ");
    splits("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,");
    splits("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   ");
    splits(
        "[RULE:   /  /U, DEFAULT]",
        "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,",
    );
    // escape sequences
    splits(r"[RULE:\/\\\(\)\n\t/\/\/]", r"RULE:\/\\\(\)\n\t/\/\//");
    splits(
        r"[RULE:\**\/+/*/L, RULE:\/*\**/**]",
        r"RULE:\**\/+/*/L,RULE:\/*\**/**/",
    );
    // rules rule
    splits(
        r"[RULE:,RULE:,/,RULE:,\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
        r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
    );
}

#[test]
fn comma_with_whitespace() {
    let m = mapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT");
    assert_eq!(
        m.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz").unwrap(),
        r"Tkac\, Adam"
    );
}

#[test]
fn rules_across_lines() {
    // A properties file continues a value over lines with `\`; the rules may also keep the
    // newlines (Kafka's splitter takes any whitespace around the commas).
    let m = mapper("RULE:^CN=(.*?),OU=eng.*$/$1/,\n  RULE:^CN=(.*?),.*$/other-$1/U,\n  DEFAULT");
    assert_eq!(m.name("CN=alice,OU=eng,O=kquota").unwrap(), "alice");
    assert_eq!(m.name("CN=bob,OU=ops,O=kquota").unwrap(), "OTHER-BOB");
    assert_eq!(m.name("O=kquota").unwrap(), "O=kquota");
}

#[test]
fn default_rules_and_no_match() {
    let m = SslPrincipalMapper::from_rules(None).unwrap();
    assert_eq!(
        m.name("CN=alice,OU=eng,O=kquota").unwrap(),
        "CN=alice,OU=eng,O=kquota"
    );
    let m = mapper("RULE:^CN=(.*?),OU=eng.*$/$1/");
    let err = m.name("CN=bob,OU=ops").unwrap_err();
    assert_eq!(
        err.0,
        "No rules apply to CN=bob,OU=ops, rules [RULE:^CN=(.*?),OU=eng.*$/$1]"
    );
    // first match wins
    let m = mapper("RULE:^CN=([a-z]+),.*$/$1/U, RULE:^CN=(.*)$/$1/");
    assert_eq!(m.name("CN=x,O=y").unwrap(), "X");
}

#[test]
fn replacement_syntax_as_java() {
    // $N beyond the groups is literal (Kafka's escapeLiteralBackReferences); $12 with one group is
    // group 1 then "2"; \x is x; $0 is the whole match.
    assert_eq!(
        mapper("RULE:^CN=([a-z]+)$/$1@$4/").name("CN=alice").unwrap(),
        "alice@$4"
    );
    assert_eq!(
        mapper("RULE:^CN=([a-z]+)$/$12/").name("CN=alice").unwrap(),
        "alice2"
    );
    assert_eq!(
        mapper(r"RULE:^CN=([a-z]+)$/\\$1/").name("CN=alice").unwrap(),
        r"\alice"
    );
    assert_eq!(
        mapper("RULE:^CN=[a-z]+$/[$0]/").name("CN=alice").unwrap(),
        "[CN=alice]"
    );
    // every match of the pattern is replaced, as String.replaceAll
    assert_eq!(mapper("RULE:[a-z]*/x/").name("abc").unwrap(), "xx");
    // a pattern the regex crate cannot compile is refused at parse time with the rule named
    let err = SslPrincipalMapper::from_rules(Some(r"RULE:^(a)\1$/$1/")).unwrap_err();
    assert!(err.0.contains(r"RULE:^(a)\1$/$1/"), "{err}");
    // a `$` that is not a group reference (Java: Illegal group reference)
    assert!(SslPrincipalMapper::from_rules(Some("RULE:^(.*)$/a$b/")).is_err());
}
